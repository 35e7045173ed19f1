//! Composite fusion: chains and trees of elementwise ops become one Composite op holding a
//! scalar program, so a backend runs them as one loop with no intermediate arrays. A producer
//! is fused into its consumer when the consumer is its only reader and it is not a function
//! output; fused programs keep at most [`MAX_INPUTS`] inputs and [`MAX_PROGRAM_INSTS`]
//! instructions, and a group with costly math
//! (`UnaryOp::is_costly`, powers) is not fused into a consumer that broadcasts it, which would
//! compute it again for every element it is broadcast to. A reduction takes its input's
//! elementwise group as a prologue (`sum(exp(x - m))` reads `x` once and stores no `exp`).
//! Constants of one value (0-d, or broadcast by folding) go into the programs as that value.

use crate::ir::scalar::{program_of, ScalarInst, ScalarOp, ScalarProgram};
use crate::ir::{F64Bits, Func, Inst, Op, Value};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::Arc;

/// The most inputs a fused Composite may read (a limit on registers and pointers per kernel).
pub const MAX_INPUTS: usize = 8;

/// The most scalar instructions a fused program may hold. Each fusion copies the program it
/// grows, so without a limit a chain of n elementwise ops cost n^2 time and memory to fuse (a
/// chain of 20,000 ran out of memory); longer chains become several kernels, each of which
/// still reads its inputs once.
pub const MAX_PROGRAM_INSTS: usize = 256;

/// `consumer` with every input reading `value` replaced by `producer` (whose inputs are
/// `producer_args`), over the combined argument list, which is returned with the program.
fn inline(
    consumer: &ScalarProgram,
    consumer_args: &[Value],
    value: Value,
    producer: &ScalarProgram,
    producer_args: &[Value],
) -> (ScalarProgram, Vec<Value>) {
    let mut args: Vec<Value> = Vec::new();
    let mut insts: Vec<ScalarInst> = Vec::new();
    // One `input` register per distinct argument.
    let mut input_reg: HashMap<Value, usize> = HashMap::new();
    let mut read = |v: Value, dtype, insts: &mut Vec<ScalarInst>| {
        *input_reg.entry(v).or_insert_with(|| {
            let idx = args.iter().position(|&a| a == v).unwrap_or_else(|| {
                args.push(v);
                args.len() - 1
            });
            insts.push(ScalarInst {
                op: ScalarOp::Input(idx),
                args: vec![],
                dtype,
            });
            insts.len() - 1
        })
    };
    let mut pmap = Vec::new();
    for inst in &producer.insts {
        let r = match inst.op {
            ScalarOp::Input(i) => read(producer_args[i], inst.dtype, &mut insts),
            ref o => {
                insts.push(ScalarInst {
                    op: o.clone(),
                    args: inst.args.iter().map(|&a| pmap[a]).collect(),
                    dtype: inst.dtype,
                });
                insts.len() - 1
            }
        };
        pmap.push(r);
    }
    let produced = pmap[producer.outputs[0]];
    let mut cmap = Vec::new();
    for inst in &consumer.insts {
        let r = match inst.op {
            ScalarOp::Input(i) if consumer_args[i] == value => produced,
            ScalarOp::Input(i) => read(consumer_args[i], inst.dtype, &mut insts),
            ref o => {
                insts.push(ScalarInst {
                    op: o.clone(),
                    args: inst.args.iter().map(|&a| cmap[a]).collect(),
                    dtype: inst.dtype,
                });
                insts.len() - 1
            }
        };
        cmap.push(r);
    }
    let outputs = consumer.outputs.iter().map(|&o| cmap[o]).collect();
    (ScalarProgram { insts, outputs }, args)
}

/// A constant of one value (0-d, or every element the same: a gradient seed that folding
/// broadcast) that a scalar program can hold exactly.
fn scalar_constant(inst: &Inst) -> Option<ScalarProgram> {
    let Op::Const(t) = &inst.op else { return None };
    let values = t.to_f64_vec();
    let v = *values.first()?;
    if values.iter().any(|x| x.to_bits() != v.to_bits()) {
        return None;
    }
    let exact = match t {
        Tensor::I64(a) => a.iter().all(|&x| x as f64 as i64 == x),
        _ => true,
    };
    exact.then(|| ScalarProgram {
        insts: vec![ScalarInst {
            op: ScalarOp::Const(F64Bits(v)),
            args: vec![],
            dtype: t.dtype(),
        }],
        outputs: vec![0],
    })
}

/// Fuses the top-level body of `func`, then each region's body as a function of its own (its
/// parameters and the values it reads from outside are that function's parameters, so
/// nothing outside a region is fused into it or out of it). A scan's body runs once per
/// step, so its fused kernels pay off as many times.
pub fn fuse(func: Func) -> Func {
    let mut f = fuse_block(func);
    let mut body = std::mem::take(&mut f.body);
    for inst in &mut body {
        for r in &mut inst.regions {
            super::on_region(&mut f, r, fuse);
        }
    }
    f.body = body;
    f
}

/// Fuses the top-level body of `func` (regions are left as they are). Takes the function
/// by value: a region is fused as a function of all the values (`on_region`), so a copy
/// here would make a chain of regions quadratic.
fn fuse_block(mut f: Func) -> Func {
    // The instructions as they were (the loop replaces them in place): the producers of
    // custom ops' operands are looked up here.
    let original = f.body.clone();
    let defined_by = super::def_positions(&f);
    // How often each value is read, kept up to date as groups repeat shared producers.
    let mut uses = super::read_counts(&f);
    let outputs: std::collections::HashSet<Value> = f.outputs.iter().copied().collect();
    // The fusable instructions so far, by the value they define: (program, args).
    type Group = (ScalarProgram, Vec<Value>, HashMap<Value, usize>);
    let mut fusable: HashMap<Value, Group> = HashMap::new();
    let mut dead: Vec<bool> = vec![false; f.body.len()];
    let mut def_at: HashMap<Value, usize> = HashMap::new();
    let mut constants: HashMap<Value, ScalarProgram> = HashMap::new();
    let mut body = std::mem::take(&mut f.body);
    let mut gone: Vec<usize> = Vec::new();
    // Indexed: an instruction is replaced in place while earlier ones are marked dead.
    #[allow(clippy::needless_range_loop)]
    for idx in 0..body.len() {
        let inst = &body[idx];
        // Small constants go into the programs that read them (copied, so any number of
        // readers may take them); the constant instruction goes once nobody reads it.
        if let Some(p) = scalar_constant(inst) {
            constants.insert(inst.results[0], p);
            continue;
        }
        // A reduction whose input is a fusable group read by nothing else takes the group as
        // its prologue: the input is then computed as it is reduced, never stored whole.
        if let Op::Reduce { op, axes, keepdims } = &inst.op {
            let a = inst.args[0];
            if uses.get(&a) == Some(&1) && fusable.contains_key(&a) {
                let (prog, args, _) = fusable.remove(&a).expect("checked above");
                dead[def_at[&a]] = true;
                let fused = Op::FusedReduce {
                    op: *op,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                    program: Arc::new(prog),
                };
                body[idx] = Inst {
                    op: fused,
                    args,
                    results: body[idx].results.clone(),
                    regions: vec![],
                    inplace: None,
                };
            }
            continue;
        }
        // An add that accumulates a custom op's output stays an add: the op adds into the
        // running sum's buffer (`kAddTo`, see `accumulate.rs`).
        let producer = |v: Value| defined_by.get(&v).map(|&i| &original[i]);
        let reads = |v: Value| uses.get(&v).copied().unwrap_or(0);
        if crate::ir::custom::add_to_operand(&f, inst, &producer, &reads).is_some() {
            continue;
        }
        let Some(mut prog) = (inst.results.len() == 1)
            .then(|| program_of(&inst.op, &f, &inst.args, inst.results[0]))
            .flatten()
        else {
            continue;
        };
        let mut args = inst.args.clone();
        // Inline single-use fusable producers, as long as the input limit holds.
        // How often the group being fused reads each value; a producer can join the group
        // when the group is its only reader.
        let mut inlined = false;
        let mut local: HashMap<Value, usize> = HashMap::new();
        for &a in &inst.args {
            *local.entry(a).or_default() += 1;
        }
        loop {
            let only_here =
                |a: &Value| uses.get(a).copied().unwrap_or(0) == local.get(a).copied().unwrap_or(0);
            // A group with costly math is not fused where the consumer broadcasts it: it
            // would be computed again for every element it is broadcast to (a `log` of a row
            // sum, once per element of the row, in a softmax's loss).
            let costly_here =
                |a: &Value| costly(&fusable[a].0) && broadcast_into(&f, *a, inst.results[0]);
            // A constant of one value goes in as that value where the other operands alone
            // have the result's shape (its own shape then adds nothing to the broadcast).
            let result_ty = &f.ty(inst.results[0]).shape;
            let shaped = |a: &Value| {
                f.ty(*a).shape.is_empty()
                    || args.iter().any(|b| {
                        b != a && !constants.contains_key(b) && &f.ty(*b).shape == result_ty
                    })
            };
            // A cheap group that others read too is computed again here rather than read
            // (XLA duplicates cheap producers the same way): once every reader does so, it
            // is never stored. Not where this consumer broadcasts it, nor a function output
            // (which is stored anyway).
            let repeat_here = |a: &Value| {
                fusable.get(a).is_some_and(|g| repeatable(&g.0))
                    && !outputs.contains(a)
                    && !broadcast_into(&f, *a, inst.results[0])
            };
            let candidate = args.iter().copied().find(|a| {
                (constants.contains_key(a) && shaped(a))
                    || (only_here(a) && fusable.contains_key(a) && !costly_here(a))
                    || (!only_here(a) && repeat_here(a))
            });
            let Some(a) = candidate else { break };
            if let Some(c) = constants.get(&a) {
                let (np, na) = inline(&prog, &args, a, c, &[]);
                prog = np;
                args = na;
                inlined = true;
                continue;
            }
            let shared = !only_here(&a);
            let (pp, pa, preads) = &fusable[&a];
            if prog.insts.len() + pp.insts.len() > MAX_PROGRAM_INSTS {
                break;
            }
            let (np, na) = inline(&prog, &args, a, pp, pa);
            if na.len() > MAX_INPUTS {
                break;
            }
            let preads = preads.clone();
            let here = local.remove(&a).unwrap_or(0);
            for (&v, &n) in &preads {
                *local.entry(v).or_default() += n;
            }
            prog = np;
            args = na;
            inlined = true;
            if shared {
                // This group reads the producer's inputs now, in place of the producer.
                for (&v, &n) in &preads {
                    *uses.entry(v).or_default() += n;
                }
                let left = uses.get(&a).copied().unwrap_or(0).saturating_sub(here);
                uses.insert(a, left);
                if left > 0 {
                    continue;
                }
                // Its last reader repeated it: it goes, and with it its own reads.
                for (&v, &n) in &preads {
                    if let Some(u) = uses.get_mut(&v) {
                        *u = u.saturating_sub(n);
                    }
                }
            }
            dead[def_at[&a]] = true;
            gone.push(def_at[&a]);
            fusable.remove(&a);
        }
        // The producers inlined here go now (their programs live on in this one), not at
        // the end: a chain would keep every prefix of its program until then.
        for at in gone.drain(..) {
            body[at] = Inst {
                op: Op::IfElse,
                args: Vec::new(),
                results: Vec::new(),
                regions: Vec::new(),
                inplace: None,
            };
        }
        let result = body[idx].results[0];
        if inlined || matches!(body[idx].op, Op::Composite { .. }) {
            let name = match &body[idx].op {
                Op::Composite { name, .. } => name.clone(),
                _ => "fused".to_string(),
            };
            body[idx] = Inst {
                op: Op::Composite {
                    name,
                    program: Arc::new(prog.clone()),
                },
                args: args.clone(),
                results: vec![result],
                regions: vec![],
                inplace: None,
            };
        }
        fusable.insert(result, (prog, args, local));
        def_at.insert(result, idx);
    }
    f.body = body
        .into_iter()
        .zip(dead)
        .filter(|(_, d)| !d)
        .map(|(i, _)| i)
        .collect();
    remove_dead_constants(&mut f);
    f
}

/// The most operations (past its inputs and constants) a group may hold to be computed again
/// by each of its readers rather than stored once.
pub const MAX_REPEATED_OPS: usize = 2;

/// Whether `p` is cheap enough to compute again in each reader: a few operations, none
/// costly. Computing it again gives the same bits (the same operations on the same values).
fn repeatable(p: &ScalarProgram) -> bool {
    let ops = (p.insts.iter())
        .filter(|i| !matches!(i.op, ScalarOp::Input(_) | ScalarOp::Const(_)))
        .count();
    ops <= MAX_REPEATED_OPS && !costly(p)
}

/// Whether `p` computes a costly op (`UnaryOp::is_costly`, or a power).
fn costly(p: &ScalarProgram) -> bool {
    p.insts.iter().any(|i| match i.op {
        ScalarOp::Unary(u) => u.is_costly(),
        ScalarOp::Binary(b) => b == crate::ir::BinaryOp::Pow,
        _ => false,
    })
}

/// Whether `value` is broadcast in computing `result` (an elementwise op reading it): a dim
/// of 1, or a missing one, where the result's is not 1 (or not known).
fn broadcast_into(f: &Func, value: Value, result: Value) -> bool {
    let (v, r) = (&f.ty(value).shape, &f.ty(result).shape);
    let missing = r.len().saturating_sub(v.len());
    r[..missing].iter().any(|&d| d != Some(1))
        || v.iter()
            .zip(&r[missing..])
            .any(|(&a, &b)| a == Some(1) && b != Some(1))
}

/// Drops constant instructions nothing reads any more (their values went into programs).
fn remove_dead_constants(f: &mut Func) {
    let read = super::read_values(f);
    f.body
        .retain(|i| !matches!(i.op, Op::Const(_)) || i.results.iter().any(|r| read.contains(r)));
}
