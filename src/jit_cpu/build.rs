//! Compiling a function for the CPU: which steps of its plan get a generated kernel, and the
//! kernels' generation, spread over threads.
//!
//! Kernels are independent functions, so they are generated in shards, one Cranelift module
//! per shard, on rayon's threads: Cranelift's code generation is most of a compile, and this
//! divides it by the number of threads. Steps that would share a kernel (equal programs, see
//! `share_key`) go to the same shard, so each kernel is still generated once. The dumps come
//! out in the plan's order whatever the sharding.

use super::{reduce, JitCode, MapKernel, ReduceKernel};
use crate::codegen::clif::map::{self as codegen, KernelFn};
use crate::codegen::clif::reduce as reduce_codegen;
use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::ir::{DType, Func, Op, Value};
use crate::lower::{Step, StepId};
use crate::runtime::interp::Interpreter;
use crate::runtime::{Executable, Thunk};
use cranelift_jit::JITModule;
use cranelift_module::FuncId;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A reduction to generate: its op, axes and prologue (the identity for a plain `Reduce`).
struct GenSpec {
    op: crate::ir::ReduceOp,
    axes: Option<Vec<usize>>,
    keepdims: bool,
    program: Arc<crate::ir::scalar::ScalarProgram>,
    fused: bool,
    lanes: Option<i64>,
    /// Whether the kernel has leaves for reduced dims that do not merge.
    nd: bool,
}

impl GenSpec {
    fn value_dtype(&self) -> DType {
        self.program.insts[self.program.outputs[0]].dtype
    }
}

/// What to generate for a step, if it is a reduction the generator takes.
fn gen_spec(step: &crate::lower::Step) -> Option<GenSpec> {
    let crate::lower::Kernel::Reduce {
        op,
        axes,
        keepdims,
        program,
        fused,
        ..
    } = &step.kernel
    else {
        return None;
    };
    Some(GenSpec {
        op: *op,
        axes: axes.clone(),
        keepdims: *keepdims,
        program: program.clone(),
        fused: *fused,
        lanes: None,
        nd: false,
    })
}

/// For each argument of a reduction over `axes` (of its index space; `None`: all), whether the
/// plan reads it broadcast along every one of those axes (always), along none (never), or
/// along some (unknown: the kernel checks its stride at run time); the plan's access decides
/// (`lower::access`), not the types.
///
/// An argument broadcast along some reduced axes only is not "never": where the axes it does
/// read have extent 1 at run time (a `?` dim that is 1), the reduced axes merge into one
/// along which it steps by 0, and a row leaf that took its stride to be its element size read
/// past its end (random program 484 of seed 1796410791390762651: a sum over `max(state, x)`
/// with `x: [1, ?, 1]` read 16 bytes a step from an array of one element).
fn broadcast_along(step: &Step, axes: Option<&[usize]>) -> Vec<codegen::Bcast> {
    let crate::lower::Kernel::Reduce { access, space, .. } = &step.kernel else {
        unreachable!("only reductions are generated here")
    };
    let all: Vec<usize> = (0..space.len()).collect();
    let axes = axes.unwrap_or(&all);
    access
        .iter()
        .map(|a| {
            let broadcast = axes.iter().filter(|&&ax| a.broadcast_on(ax)).count();
            match broadcast {
                n if n == axes.len() => codegen::Bcast::Always,
                0 => codegen::Bcast::Never,
                _ => codegen::Bcast::Unknown,
            }
        })
        .collect()
}

/// Compiles `func` for the CPU.
pub fn compile(func: &Func, dump: &DumpOptions) -> Result<Box<dyn Executable>> {
    let (exec, asm) = codegen::with_listing(dump.enabled("asm"), || compile_kernels(func, dump));
    dump.dump(&func.name, "asm", || asm);
    exec
}

/// The kernels dump's line for the plan's products (none where it has none): which ISA's
/// GEMM kernels they run (`KILN_CPU_ISA`, else the widest this CPU has), and the dtypes.
fn products_line(plan: &crate::lower::Plan) -> String {
    let products: Vec<String> = (plan.all_steps().into_iter())
        .filter(|s| matches!(s.kernel, crate::lower::Kernel::Gemm { .. }))
        .map(|s| format!("%{}", s.results[0].0))
        .collect();
    if products.is_empty() {
        return String::new();
    }
    let isa = crate::gemm::isa();
    format!(
        "products {}: gemm, {} kernels ({} f32 tiles, {} f64)\n",
        products.join(", "),
        isa.name(),
        crate::gemm::tile_text::<f32>(isa),
        crate::gemm::tile_text::<f64>(isa),
    )
}

/// The kernels dump's line for the host math (none where no kernel's math may go to the
/// buffer functions): which width of buffer functions the kernels call (`host_math::width`,
/// the products' ISA) and for which values.
fn host_math_line(plan: &crate::lower::Plan) -> String {
    use crate::codegen::clif::host_math;
    let Some(width) = host_math::width() else {
        return String::new();
    };
    let staged: Vec<String> = (plan.all_steps().into_iter())
        .filter(|s| match &s.kernel {
            crate::lower::Kernel::Map { program, .. }
            | crate::lower::Kernel::Reduce { program, .. } => {
                host_math::split(program, s.args.len()).is_some()
            }
            _ => false,
        })
        .map(|s| format!("%{}", s.results[0].0))
        .collect();
    if staged.is_empty() {
        return String::new();
    }
    let lanes = if width == "avx512" { 16 } else { 8 };
    format!(
        "math of {}: {width} buffer functions ({lanes} f32 lanes)\n",
        staged.join(", ")
    )
}

/// Shards are worth their module only with a few kernels each.
const KERNELS_PER_SHARD: usize = 3;

/// `compile` without the machine-code listing.
fn compile_kernels(func: &Func, dump: &DumpOptions) -> Result<Box<dyn Executable>> {
    let plan = crate::lower::lower_with(func, crate::lower::LowerOptions::all());
    dump.dump(&func.name, "schedule", || plan.to_string());
    // The steps with a kernel to generate: maps and reductions with one result.
    let candidates: Vec<&Step> = plan
        .all_steps()
        .into_iter()
        .filter(|s| {
            s.results.len() == 1
                && matches!(
                    s.kernel,
                    crate::lower::Kernel::Map { .. } | crate::lower::Kernel::Reduce { .. }
                )
        })
        .collect();
    // Values the plan computes into buffers of their own (standard layout): maps, reductions
    // and matrix products, row-group members included.
    let contiguous: HashSet<Value> = plan
        .all_steps()
        .into_iter()
        .filter(|s| {
            matches!(
                s.kernel,
                crate::lower::Kernel::Map { .. }
                    | crate::lower::Kernel::Reduce { .. }
                    | crate::lower::Kernel::Gemm { .. }
            )
        })
        .flat_map(|s| s.results.iter().copied())
        .collect();
    // The machine-code listing is collected on this thread, so it takes one shard here.
    let listing = dump.enabled("asm");
    let threads = if listing {
        1
    } else {
        rayon::current_num_threads()
    };
    let n_shards = threads.min(candidates.len() / KERNELS_PER_SHARD).max(1);
    let owner = assign_shards(func, &candidates, &contiguous, n_shards);
    let clif = dump.enabled("clif");
    let run = |s: usize| {
        codegen::with_clif_text(clif, || {
            compile_shard(func, &candidates, &contiguous, &owner, s)
        })
    };
    let shards: Vec<Result<Shard>> = if n_shards == 1 {
        vec![run(0)]
    } else {
        use rayon::prelude::*;
        (0..n_shards).into_par_iter().map(run).collect()
    };
    let mut shards = shards.into_iter().collect::<Result<Vec<Shard>>>()?;
    let mut lines: Vec<(usize, String)> = Vec::new();
    let mut clifs: Vec<(usize, String)> = Vec::new();
    for s in &mut shards {
        lines.append(&mut s.lines);
        clifs.append(&mut s.clif);
    }
    lines.sort_by_key(|(k, _)| *k);
    clifs.sort_by_key(|(k, _)| *k);
    dump.dump(&func.name, "kernels", || {
        let mut text: String = lines.iter().map(|(_, l)| l.as_str()).collect();
        text.push_str(&products_line(&plan));
        text.push_str(&host_math_line(&plan));
        text
    });
    dump.dump(&func.name, "clif", || {
        clifs
            .iter()
            .map(|(_, c)| format!("{c}\n"))
            .collect::<String>()
    });
    let code = Arc::new(JitCode(
        shards
            .iter_mut()
            .filter_map(|s| s.module.0.take())
            .collect(),
    ));
    let mut kernels: HashMap<StepId, Arc<dyn Thunk>> = HashMap::new();
    let mut plain_maps: HashMap<StepId, (KernelFn, usize)> = HashMap::new();
    for shard in shards {
        for (v, p, out_dtypes, reduce) in shard.maps {
            // SAFETY: `p` is the finalized code of a kernel generated with `KernelFn`'s
            // signature, in a module `code` keeps.
            let f: KernelFn = unsafe { std::mem::transmute::<usize, KernelFn>(p) };
            if reduce.is_none() {
                plain_maps.insert(v, (f, out_dtypes.len()));
            }
            let map = MapKernel {
                f,
                out_dtypes,
                _code: code.clone(),
            };
            let thunk: Arc<dyn Thunk> = match reduce {
                Some((op, keepdims)) => Arc::new(ReduceKernel {
                    prologue: map,
                    op,
                    keepdims,
                }),
                None => Arc::new(map),
            };
            kernels.insert(v, thunk);
        }
        for (v, p, spec) in shard.reductions {
            // SAFETY: `p` is the finalized entry of a reduction generated with `ReduceFn`'s
            // signature, in a module `code` keeps.
            let f = unsafe { std::mem::transmute::<usize, reduce_codegen::ReduceFn>(p) };
            let out_dtype = reduce_codegen::acc_dtype(spec.op, spec.value_dtype());
            kernels.insert(
                v,
                Arc::new(reduce::GenReduce {
                    f,
                    op: spec.op,
                    axes: spec.axes,
                    keepdims: spec.keepdims,
                    program: spec.program,
                    fused: spec.fused,
                    out_dtype,
                    lanes: spec.lanes,
                    nd: spec.nd,
                    column_sum: reduce::host_column_sum(spec.op, spec.fused, out_dtype),
                    _code: code.clone(),
                }),
            );
        }
    }
    let direct = super::direct::Direct::plan(func, &plan, &plain_maps, code);
    Ok(Box::new(super::direct::CpuExecutable {
        vm: Interpreter::with_thunks(func.clone(), plan, kernels),
        direct,
    }))
}

/// How a reduction's kernel is generated: what the types say about its operands'
/// broadcasting along the reduced axes, whether it walks unmerged axes, and which vector
/// leaves it gets.
struct ReduceShape {
    along_n: Vec<codegen::Bcast>,
    nd: bool,
    vectors: reduce_codegen::VectorLeaves,
}

/// The key under which a reduction's kernel is shared (its op, what the types say about its
/// operands' broadcasting, its shape, its prologue), and that shape.
fn reduce_key(
    func: &Func,
    step: &Step,
    spec: &GenSpec,
    contiguous: &HashSet<Value>,
) -> (String, ReduceShape) {
    let along_n = broadcast_along(step, spec.axes.as_deref());
    // Cursor leaves for reduced dims that do not merge: only several reduced axes can fail
    // to merge.
    let rank = args_rank(func, &step.args);
    let nd = spec.axes.as_ref().map_or(rank, |a| a.len()) >= 2;
    let vectors = vector_leaves(step, spec.axes.as_deref(), nd, contiguous);
    (
        format!(
            "{} {along_n:?} {nd} {vectors:?} {}",
            spec.op.name(),
            spec.program
        ),
        ReduceShape {
            along_n,
            nd,
            vectors,
        },
    )
}

/// The rank of the arguments' broadcast shape.
fn args_rank(func: &Func, args: &[Value]) -> usize {
    args.iter().map(|&a| func.ty(a).rank()).max().unwrap_or(0)
}

/// Which vector leaves a reduction over `axes` needs (see `VectorLeaves`): when every operand
/// is a value the plan computes (standard layout) and the plan's index space is known, lanes
/// along the reduced axes if the innermost axis longer than 1 is reduced, else vectors of
/// outputs.
fn vector_leaves(
    step: &Step,
    axes: Option<&[usize]>,
    nd: bool,
    contiguous: &HashSet<Value>,
) -> reduce_codegen::VectorLeaves {
    use reduce_codegen::VectorLeaves;
    let crate::lower::Kernel::Reduce { space, .. } = &step.kernel else {
        unreachable!("only reductions are generated here")
    };
    if nd || !step.args.iter().all(|a| contiguous.contains(a)) {
        return VectorLeaves::Both;
    }
    let Some(shape) = space.iter().copied().collect::<Option<Vec<usize>>>() else {
        return VectorLeaves::Both;
    };
    match (0..shape.len()).rev().find(|&a| shape[a] != 1) {
        Some(last) if axes.is_none_or(|ax| ax.contains(&last)) => VectorLeaves::Row,
        Some(_) => VectorLeaves::Col,
        None => VectorLeaves::Both,
    }
}

/// What a map kernel's code depends on: the arguments' broadcasting along the rows its
/// vectors run on (the plan's access), and the program.
fn map_bcast(step: &Step) -> Vec<codegen::Bcast> {
    let crate::lower::Kernel::Map { access, .. } = &step.kernel else {
        unreachable!("only maps have map kernels")
    };
    access
        .iter()
        .map(|a| {
            if a.broadcast_on_last() {
                codegen::Bcast::Always
            } else {
                codegen::Bcast::Never
            }
        })
        .collect()
}

fn map_key(
    step: &Step,
    bcast: &[codegen::Bcast],
    program: &crate::ir::scalar::ScalarProgram,
) -> String {
    format!("{} {bcast:?} {program}", step.args.len())
}

/// The key that decides a step's shard, with a rough cost of its kernel (a reduction is
/// several functions: leaves for rows, columns and single elements, and an entry).
fn share_key(func: &Func, step: &Step, contiguous: &HashSet<Value>) -> (String, usize) {
    if let Some(spec) = gen_spec(step) {
        let (key, shape) = reduce_key(func, step, &spec, contiguous);
        let cost = match (shape.nd, shape.vectors) {
            (true, _) => 8,
            (false, reduce_codegen::VectorLeaves::Both) => 4,
            (false, _) => 3,
        };
        return (key, cost);
    }
    let program = match (&step.op, &step.kernel) {
        (Op::FusedReduce { program, .. }, _) => program,
        (_, crate::lower::Kernel::Map { program, .. }) => program,
        _ => return (format!("step {}", step.results[0]), 1),
    };
    (map_key(step, &map_bcast(step), program), 1)
}

/// For each candidate, the shard that generates it: steps with one key together, keys in
/// order of first use, each to the shard with the least work so far.
fn assign_shards(
    func: &Func,
    candidates: &[&Step],
    contiguous: &HashSet<Value>,
    n_shards: usize,
) -> Vec<usize> {
    if n_shards == 1 {
        return vec![0; candidates.len()];
    }
    let mut load = vec![0usize; n_shards];
    let mut placed: HashMap<String, usize> = HashMap::new();
    candidates
        .iter()
        .map(|step| {
            let (key, cost) = share_key(func, step, contiguous);
            *placed.entry(key).or_insert_with(|| {
                let s = (0..n_shards).min_by_key(|&s| load[s]).unwrap_or(0);
                load[s] += cost;
                s
            })
        })
        .collect()
}

/// A map kernel (or a fused reduction's prologue) generated for a step: the step's result,
/// the kernel (`F`: its id, then its address), its outputs' dtypes, and the reduction that
/// follows the prologue, if any.
type Generated<F> = (StepId, F, Vec<DType>, Option<(crate::ir::ReduceOp, bool)>);

/// A module that moves from the thread that generated it to the one that assembles the
/// executable, once, and is never shared.
struct Owned(Option<JITModule>);

// SAFETY: see `Owned`: the module is used by one thread at a time.
unsafe impl Send for Owned {}

/// What one shard generated: finalized code addresses (as integers, to cross threads) by
/// step, and its lines of the `kernels` and `clif` dumps by candidate index.
struct Shard {
    module: Owned,
    maps: Vec<Generated<usize>>,
    reductions: Vec<(StepId, usize, GenSpec)>,
    lines: Vec<(usize, String)>,
    clif: Vec<(usize, String)>,
}

/// Generates the kernels of the candidates `owner` gives to shard `me`, in a module of its own.
fn compile_shard(
    func: &Func,
    candidates: &[&Step],
    contiguous: &HashSet<Value>,
    owner: &[usize],
    me: usize,
) -> Result<Shard> {
    let mut module = codegen::new_module()?;
    type Pending = (
        StepId,
        FuncId,
        Vec<DType>,
        Option<(crate::ir::ReduceOp, bool)>,
    );
    let mut pending: Vec<Pending> = Vec::new();
    let mut reductions: Vec<(StepId, FuncId, GenSpec)> = Vec::new();
    let mut lines = Vec::new();
    let mut clif = Vec::new();
    // Kernels already generated, by what determines their code (kind, program, inputs): equal
    // steps share one (a training step's parameter updates, its bias-gradient sums), which
    // keeps compile time proportional to the distinct kernels.
    let mut generated_reduce: HashMap<String, reduce_codegen::ReduceKernelInfo> = HashMap::new();
    let mut generated_map: HashMap<String, FuncId> = HashMap::new();
    for (k, step) in candidates.iter().enumerate() {
        if owner[k] != me {
            continue;
        }
        let value = step.id;
        // Reductions over any axes: a generated loop nest (a prologue with several outputs
        // keeps the reference or the prologue-then-perform kernel).
        if let Some(spec) = gen_spec(step) {
            let name = format!("{}_r{k}", func.name);
            let (key, shape) = reduce_key(func, step, &spec, contiguous);
            let defined = match generated_reduce.get(&key) {
                Some(info) => Ok(info.clone()),
                None => reduce_codegen::define_reduce_kernel(
                    &mut module,
                    &name,
                    spec.op,
                    &spec.program,
                    &shape.along_n,
                    shape.nd,
                    shape.vectors,
                    true,
                )
                .inspect(|info| {
                    clif.push((k, info.clif.clone()));
                    generated_reduce.insert(key, info.clone());
                }),
            };
            match defined {
                Ok(info) => {
                    lines.push((
                        k,
                        format!(
                            "{name}: reduce {} over {} (generated{}) -> %{} over {} inputs: {}\n",
                            spec.op.name(),
                            match &spec.axes {
                                Some(a) => format!("axes {a:?}"),
                                None => "all axes".to_string(),
                            },
                            match info.lanes {
                                Some(l) => format!(", {l} lanes"),
                                None => ", scalar".to_string(),
                            },
                            value.0,
                            step.args.len(),
                            spec.program
                        ),
                    ));
                    let spec = GenSpec {
                        lanes: info.lanes,
                        nd: info.nd,
                        ..spec
                    };
                    reductions.push((value, info.entry, spec));
                    continue;
                }
                // Not generated (a construct Cranelift rejects): the paths below, or perform.
                Err(_) if matches!(step.op, Op::Reduce { .. }) => continue,
                Err(_) => {}
            }
        }
        if matches!(step.op, Op::Reduce { .. }) {
            continue;
        }
        // A fused reduction is compiled when it reduces the last axis of its prologue's
        // result; others run their reference implementation.
        let (program, reduce) = match &step.op {
            Op::FusedReduce {
                op,
                axes,
                keepdims,
                program,
            } => {
                let rank = args_rank(func, &step.args);
                if rank == 0 || axes.as_deref() != Some(&[rank - 1][..]) {
                    continue;
                }
                ((**program).clone(), Some((*op, *keepdims)))
            }
            _ => match &step.kernel {
                crate::lower::Kernel::Map { program, .. } => ((**program).clone(), None),
                _ => continue,
            },
        };
        let name = format!("{}_k{k}", func.name);
        let bcast = map_bcast(step);
        let key = map_key(step, &bcast, &program);
        let id = match generated_map.get(&key) {
            Some(&id) => id,
            None => {
                let (id, text) =
                    codegen::define_map_kernel_with(&mut module, &name, &program, &bcast).map_err(
                        |e| {
                            Error::Unsupported(format!(
                                "{}: cannot compile {}: {e}",
                                func.name,
                                step.op.display_name()
                            ))
                        },
                    )?;
                clif.push((k, text));
                generated_map.insert(key, id);
                id
            }
        };
        let kind = match reduce {
            Some(_) => format!(
                "reduce {} over the last axis, prologue",
                step.op.display_name()
            ),
            None => format!("map {}", step.op.display_name()),
        };
        lines.push((
            k,
            format!(
                "{name}: {kind} -> %{} over {} inputs: {program}\n",
                value.0,
                step.args.len()
            ),
        ));
        let outs = program
            .outputs
            .iter()
            .map(|&o| program.insts[o].dtype)
            .collect();
        pending.push((value, id, outs, reduce));
    }
    if let Some(text) = crate::codegen::clif::nd_seek::define_nd_seek_if_used(&mut module)? {
        clif.push((candidates.len(), text));
    }
    module
        .finalize_definitions()
        .map_err(|e| Error::Unsupported(format!("cranelift: {e}")))?;
    let addr = |module: &JITModule, id| module.get_finalized_function(id) as usize;
    Ok(Shard {
        maps: pending
            .into_iter()
            .map(|(v, id, d, r)| (v, addr(&module, id), d, r))
            .collect(),
        reductions: reductions
            .into_iter()
            .map(|(v, id, spec)| (v, addr(&module, id), spec))
            .collect(),
        module: Owned(Some(module)),
        lines,
        clif,
    })
}
