//! Lowering (docs/architecture.md): the optimized SSA function as a plan of steps in kernel
//! IR, which a code generator compiles. It is a function from a `Func` to a [`Plan`]; the CPU
//! backend compiles the plan's map and reduce kernels, and the plan prints as the `schedule`
//! dump.
//!
//! Kernel IR is small and structured: a **map** kernel (a scalar program over the broadcast
//! index space of its inputs), a **reduce** kernel (the same program as a prologue, then a
//! reduction over axes), a **gemm** library call, and **perform** for what has no generated
//! code (shape ops, custom and random ops), whose reference implementation runs. An
//! `ifelse` keeps its two branches as plans of their own, so only the taken one runs.
//!
//! Each step also says which values it reads for the last time in its block (`frees`): after
//! it their buffers may be reused, which is how the runtime keeps steady-state calls free of
//! allocation. A value read inside a branch counts as read by the `ifelse` step; a block's
//! yields and the function's outputs are never freed.

pub mod access;
mod fold_broadcasts;
pub mod gemm_update;
pub mod memory;
mod row_reuse;
pub mod rows;
pub mod stretch;
pub mod text;
pub mod view;

use crate::ir::scalar::{ScalarInst, ScalarOp, ScalarProgram};
pub use access::Access;
pub use text::parse_plan;

use crate::ir::{Dim, Func, Inst, Op, ReduceOp, Reduction, Value};
use std::collections::HashMap;

use std::sync::Arc;

/// What computes one step.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// Each output element from the same-index elements of the (broadcast) inputs.
    Map {
        /// The scalar program run at each index: one input per argument, one output per
        /// result.
        program: Arc<ScalarProgram>,
        /// The index space: the result's shape.
        space: Vec<Dim>,
        /// Per argument, how it is read over `space` (`access.rs`).
        access: Vec<Access>,
    },
    /// A reduction over `axes` (`None`: all) of the value `program` computes elementwise from
    /// the inputs: the identity for a plain reduction, a fused producer otherwise.
    Reduce {
        /// The reduction (`sum`, `max`, `argmax`, ...).
        op: ReduceOp,
        /// The axes of `space` reduced (`None`: all).
        axes: Option<Vec<usize>>,
        /// Whether the reduced axes stay in the result as dims of 1.
        keepdims: bool,
        /// The scalar program whose output is reduced, one input per argument.
        program: Arc<ScalarProgram>,
        /// Whether the program is a fused producer (`fused_reduce`) rather than the identity.
        fused: bool,
        /// The index space: the arguments' broadcast shape, before reducing.
        space: Vec<Dim>,
        /// Per argument, how it is read over `space` (`access.rs`).
        access: Vec<Access>,
        /// The reduction's semantics (accumulator, start, combiner, order), as data.
        reduction: Reduction,
    },
    /// Matrix multiplication (numpy's `matmul`) through the GEMM library. `transposed[k]`:
    /// argument `k` is read with its last two dims swapped (a folded `transpose`, which then
    /// is not a step of its own: the GEMM reads the operand through strides, no copy).
    /// With `update`, the step is a product and a gradient step fused (`gemm_update.rs`): its
    /// third argument minus the product times the scale, written over that argument.
    Gemm {
        /// Per operand, whether it is read with its last two dims swapped.
        transposed: [bool; 2],
        /// The fused gradient step, if any: the step then writes over its third argument.
        update: Option<gemm_update::GemmUpdate>,
    },
    /// A view op (`view.rs`): the result is the argument's elements in a new layout over the
    /// same buffer. Backends that keep views apply it and move no data; the VM, whose values
    /// are host arrays of their own, runs the op's `perform` (a copy).
    View(view::View),
    /// The op's reference implementation.
    Perform,
    /// `ifelse`: the plan of each branch; only the taken one runs.
    IfElse {
        /// The branch run when the condition (the step's first argument) is true.
        then: Branch,
        /// The branch run when it is false.
        otherwise: Branch,
    },
    /// `scan`: the plan of its body, run once per step with `params` holding the carries and
    /// one slice of each sequence (the step's first `carries` arguments are the initial
    /// carries, the rest the sequences).
    Scan {
        /// The body's plan; it yields the new carries, then one value per stacked output.
        body: Branch,
        /// The body's parameters: the carries, then one slice per sequence.
        params: Vec<Value>,
        /// How many of the step's arguments (and of the body's parameters) are carries.
        carries: usize,
        /// Whether the steps walk the sequences from their end.
        reverse: bool,
    },
    /// A row group (`rows.rs`): map and reduce steps run together on blocks of `rows`, each
    /// member reading its arguments as `roles` say.
    Rows {
        /// The group's row count: the first dim of every member's result.
        rows: usize,
        /// The member steps, in order.
        steps: Vec<Step>,
        /// Per member, the role of each of its arguments.
        roles: Vec<Vec<rows::Role>>,
    },
}

/// One branch of an `ifelse`: its steps, then the values it yields as the step's results.
#[derive(Clone, Debug, Default)]
pub struct Branch {
    /// The branch's steps, in order.
    pub steps: Vec<Step>,
    /// The values it yields, one per result of the step.
    pub yields: Vec<Value>,
}

/// A step's index in its plan (`Plan::all_steps` order: each step, then the steps inside it), as Cranelift's entity handles index their tables. The runtime
/// keys what it keeps per step (compiled thunks, a custom op's storage) by it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId(pub u32);

impl StepId {
    /// The id a step has until lowering numbers its plan.
    pub const UNNUMBERED: StepId = StepId(u32::MAX);

    /// The id as an index into per-step tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One step: an instruction of the function with the kernel that computes it.
#[derive(Clone, Debug)]
pub struct Step {
    /// The step's index in the plan.
    pub id: StepId,
    /// What computes the step.
    pub kernel: Kernel,
    /// The instruction's op (for `perform`, and for messages).
    pub op: Op,
    /// The values the step reads, in the op's order.
    pub args: Vec<Value>,
    /// The values the step defines.
    pub results: Vec<Value>,
    /// The in-place mark: result 0 may be written into argument `k`'s buffer.
    pub inplace: Option<usize>,
    /// Values read here for the last time in this block.
    pub frees: Vec<Value>,
    /// The arguments' `?`-typed axes that must not stretch (`stretch.rs`), checked by the
    /// runtime before the step runs.
    pub stretch: Option<stretch::StretchCheck>,
}

impl Step {
    /// Whether running the step may return an error at run time (`Op::may_fail`), looking
    /// into branches and row groups.
    pub fn may_fail(&self, func: &Func) -> bool {
        match &self.kernel {
            Kernel::IfElse { then, otherwise } => then
                .steps
                .iter()
                .chain(&otherwise.steps)
                .any(|s| s.may_fail(func)),
            Kernel::Rows { steps, .. } => steps.iter().any(|s| s.may_fail(func)),
            Kernel::Scan { .. } => true,
            _ => {
                let args: Vec<_> = self.args.iter().map(|&a| func.ty(a)).collect();
                let results: Vec<_> = self.results.iter().map(|&r| func.ty(r)).collect();
                self.op.may_fail(&args, &results)
            }
        }
    }

    /// Every value the step reads, those of the steps inside it (a row group's members, an
    /// `ifelse`'s branches and what they yield) included.
    pub fn reads(&self) -> Vec<Value> {
        let mut out = self.args.clone();
        match &self.kernel {
            Kernel::Rows { steps, .. } => out.extend(steps.iter().flat_map(Step::reads)),
            Kernel::IfElse { then, otherwise } => {
                for br in [then, otherwise] {
                    out.extend(br.steps.iter().flat_map(Step::reads));
                    out.extend(&br.yields);
                }
            }
            Kernel::Scan { body, .. } => {
                out.extend(body.steps.iter().flat_map(Step::reads));
                out.extend(&body.yields);
            }
            _ => {}
        }
        out
    }
}

/// A lowered function.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The function's name.
    pub name: String,
    /// How many steps the plan has, those inside row groups and branches included: the ids
    /// run from 0 to this.
    pub n_steps: usize,
    /// A number no other plan of this process has (clones share it: they are the same plan),
    /// so that what the runtime derives from a plan can say which plan it was made for.
    pub serial: u64,
    /// The function's parameters, in order.
    pub params: Vec<Value>,
    /// The top-level steps, in the order they run.
    pub steps: Vec<Step>,
    /// The values the function returns, in order.
    pub outputs: Vec<Value>,
}

impl Plan {
    /// Every step, those inside branches included, outermost first.
    pub fn all_steps(&self) -> Vec<&Step> {
        fn walk<'a>(steps: &'a [Step], out: &mut Vec<&'a Step>) {
            for s in steps {
                out.push(s);
                match &s.kernel {
                    Kernel::IfElse { then, otherwise } => {
                        walk(&then.steps, out);
                        walk(&otherwise.steps, out);
                    }
                    Kernel::Scan { body, .. } => walk(&body.steps, out),
                    Kernel::Rows { steps, .. } => walk(steps, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.steps, &mut out);
        out
    }
}

/// Choices of the lowering that the backends make differently.
#[derive(Clone, Copy, Debug, Default)]
pub struct LowerOptions {
    /// Fold a `transpose` of the last two dims, read only by a `matmul`, into the GEMM step.
    /// The reference backend keeps every op a step of its own, so that the differential tests
    /// compare the folded plan against the unfolded one.
    pub fold_transposes: bool,
    /// Group consecutive row-local map and reduce steps into row groups (`rows.rs`).
    pub row_groups: bool,
    /// Fuse a product that only an in-place `w - g * c` reads into that step
    /// (`gemm_update.rs`).
    pub gemm_updates: bool,
    /// Drop a `broadcast_to` whose elementwise readers broadcast its input themselves
    /// (`fold_broadcasts.rs`).
    pub fold_broadcasts: bool,
}

impl LowerOptions {
    /// Every choice on: what the CPU backend asks for.
    pub fn all() -> LowerOptions {
        LowerOptions {
            fold_transposes: true,
            row_groups: true,
            gemm_updates: true,
            fold_broadcasts: true,
        }
    }
}

/// Lowers `func` (optimized, verified) to its plan, every instruction a step of its own.
pub fn lower(func: &Func) -> Plan {
    lower_with(func, LowerOptions::default())
}

/// Lowers `func` with the given choices.
pub fn lower_with(func: &Func, opts: LowerOptions) -> Plan {
    let mut steps = lower_block(func, &func.body, &func.outputs, opts);
    let n_steps = number(&mut steps, 0);
    Plan {
        name: func.name.clone(),
        n_steps,
        serial: next_serial(),
        params: func.params.clone(),
        steps,
        outputs: func.outputs.clone(),
    }
}

/// A serial number no plan of this process has had.
fn next_serial() -> u64 {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Gives `steps` and the steps inside them ids from `next` on, in `Plan::all_steps` order
/// (each step, then the steps inside it); returns the next free id.
fn number(steps: &mut [Step], mut next: usize) -> usize {
    for s in steps.iter_mut() {
        s.id = StepId(next as u32);
        next += 1;
        match &mut s.kernel {
            Kernel::IfElse { then, otherwise } => {
                next = number(&mut then.steps, next);
                next = number(&mut otherwise.steps, next);
            }
            Kernel::Scan { body, .. } => next = number(&mut body.steps, next),
            Kernel::Rows { steps, .. } => next = number(steps, next),
            _ => {}
        }
    }
    next
}
fn lower_block(func: &Func, body: &[Inst], kept: &[Value], opts: LowerOptions) -> Vec<Step> {
    let unbroadcast;
    let body = if opts.fold_broadcasts {
        unbroadcast = fold_broadcasts::fold(func, body, kept);
        unbroadcast.as_slice()
    } else {
        body
    };
    let folded;
    let (body, transposed) = if opts.fold_transposes {
        folded = fold_transposes(body, kept);
        (folded.0.as_slice(), folded.1)
    } else {
        (body, HashMap::new())
    };
    // The last step of this block that reads each value.
    let mut last: HashMap<Value, usize> = HashMap::new();
    for (pos, inst) in body.iter().enumerate() {
        for v in reads(inst) {
            last.insert(v, pos);
        }
    }
    // Only this block's own values are freed here: one from outside may be read after it.
    let defined: std::collections::HashSet<Value> = body
        .iter()
        .flat_map(|i| i.results.iter().copied())
        .collect();
    let mut frees: Vec<Vec<Value>> = vec![Vec::new(); body.len()];
    let mut ordered: Vec<(&Value, &usize)> = last.iter().collect();
    ordered.sort();
    for (&v, &pos) in ordered {
        if defined.contains(&v) && !kept.contains(&v) {
            frees[pos].push(v);
        }
    }
    let steps = body
        .iter()
        .zip(frees)
        .map(|(inst, frees)| Step {
            id: StepId::UNNUMBERED,
            kernel: match (
                kernel_of(func, inst, opts),
                transposed.get(&inst.results[0]),
            ) {
                (Kernel::Gemm { update, .. }, Some(&t)) => Kernel::Gemm {
                    transposed: t,
                    update,
                },
                (k, _) => k,
            },
            op: inst.op.clone(),
            args: inst.args.clone(),
            results: inst.results.clone(),
            inplace: inst.inplace,
            frees,
            stretch: stretch::check_of(func, &inst.op, &inst.args),
        })
        .collect();
    let steps = if opts.gemm_updates {
        gemm_update::fuse(func, steps)
    } else {
        steps
    };
    if opts.row_groups {
        rows::group_rows(func, steps)
    } else {
        steps
    }
}

/// The values an instruction reads: its arguments, and what its regions read from outside.
fn reads(inst: &Inst) -> Vec<Value> {
    fn visit(body: &[Inst], yields: &[Value], out: &mut Vec<Value>) {
        for i in body {
            out.extend(&i.args);
            for r in &i.regions {
                visit(&r.body, &r.yields, out);
            }
        }
        out.extend(yields);
    }
    let mut out = inst.args.clone();
    for r in &inst.regions {
        visit(&r.body, &r.yields, &mut out);
    }
    out
}

/// Whether `perm` swaps the last two dims and keeps the others.
fn swaps_last_two(perm: &[usize]) -> bool {
    let n = perm.len();
    n >= 2 && perm[n - 2] == n - 1 && perm[n - 1] == n - 2 && (0..n - 2).all(|i| perm[i] == i)
}

/// The block without the transposes of the last two dims that only a `matmul` reads (the
/// matmul reads the transpose's input instead), and which operands of each such matmul (by
/// its result) are read transposed.
fn fold_transposes(body: &[Inst], kept: &[Value]) -> (Vec<Inst>, HashMap<Value, [bool; 2]>) {
    let mut readers: HashMap<Value, usize> = HashMap::new();
    for v in body.iter().flat_map(reads).chain(kept.iter().copied()) {
        *readers.entry(v).or_default() += 1;
    }
    let def: HashMap<Value, usize> = body
        .iter()
        .enumerate()
        .filter(|(_, i)| i.results.len() == 1)
        .map(|(pos, i)| (i.results[0], pos))
        .collect();
    let mut out: Vec<Inst> = body.to_vec();
    let mut removed = vec![false; body.len()];
    let mut flags = HashMap::new();
    for inst in out.iter_mut() {
        if inst.op != Op::MatMul || inst.args.len() != 2 {
            continue;
        }
        let mut t = [false; 2];
        for (k, flag) in t.iter_mut().enumerate() {
            let a = inst.args[k];
            let Some(&pos) = def.get(&a) else { continue };
            if let Op::Transpose { perm } = &body[pos].op {
                if swaps_last_two(perm) && readers.get(&a) == Some(&1) {
                    inst.args[k] = body[pos].args[0];
                    removed[pos] = true;
                    *flag = true;
                }
            }
        }
        if t.contains(&true) {
            flags.insert(inst.results[0], t);
        }
    }
    let out = out
        .into_iter()
        .zip(removed)
        .filter(|(_, r)| !r)
        .map(|(i, _)| i)
        .collect();
    (out, flags)
}

fn kernel_of(func: &Func, inst: &Inst, opts: LowerOptions) -> Kernel {
    match &inst.op {
        Op::IfElse => {
            let branch = |i: usize| {
                inst.regions
                    .get(i)
                    .map(|r| Branch {
                        steps: lower_block(func, &r.body, &r.yields, opts),
                        yields: r.yields.clone(),
                    })
                    .unwrap_or_default()
            };
            Kernel::IfElse {
                then: branch(0),
                otherwise: branch(1),
            }
        }
        Op::Scan { carries, reverse } => {
            let r = inst.regions.first().cloned().unwrap_or_default();
            Kernel::Scan {
                body: Branch {
                    steps: lower_block(func, &r.body, &r.yields, opts),
                    yields: r.yields.clone(),
                },
                params: r.params,
                carries: *carries,
                reverse: *reverse,
            }
        }
        Op::Reduce { op, axes, keepdims } if inst.args.len() == 1 => {
            let program = identity(func.ty(inst.args[0]).dtype);
            let (space, access) = space_and_access(func, &inst.args);
            Kernel::Reduce {
                op: *op,
                axes: axes.clone(),
                keepdims: *keepdims,
                reduction: Reduction::of(*op, program.insts[0].dtype),
                program: Arc::new(program),
                fused: false,
                space,
                access,
            }
        }
        Op::FusedReduce {
            op,
            axes,
            keepdims,
            program,
        } if program.outputs.len() == 1 => {
            let (space, access) = space_and_access(func, &inst.args);
            Kernel::Reduce {
                op: *op,
                axes: axes.clone(),
                keepdims: *keepdims,
                reduction: Reduction::of(*op, program.insts[program.outputs[0]].dtype),
                program: program.clone(),
                fused: true,
                space,
                access,
            }
        }
        Op::MatMul => Kernel::Gemm {
            transposed: [false; 2],
            update: None,
        },
        op if inst.args.len() == 1 => match view::View::of(op, func.ty(inst.args[0]).shape.len()) {
            Some(v) => Kernel::View(v),
            None => elementwise_or_perform(func, inst),
        },
        _ => elementwise_or_perform(func, inst),
    }
}

/// A map step for an elementwise op whose scalar program is known, else a `perform` step.
fn elementwise_or_perform(func: &Func, inst: &Inst) -> Kernel {
    match &inst.op {
        op if op.is_elementwise() && inst.results.len() == 1 => {
            match crate::ir::scalar::program_of(op, func, &inst.args, inst.results[0]) {
                Some(p) => {
                    let space = func.ty(inst.results[0]).shape.clone();
                    let args: Vec<_> = inst.args.iter().map(|&a| func.ty(a)).collect();
                    Kernel::Map {
                        program: Arc::new(p),
                        access: access::accesses(space.len(), &args),
                        space,
                    }
                }
                None => Kernel::Perform,
            }
        }
        _ => Kernel::Perform,
    }
}

/// The index space of a reduction over `args` (their broadcast shape) and each one's access.
fn space_and_access(func: &Func, args: &[Value]) -> (Vec<Dim>, Vec<Access>) {
    let types: Vec<_> = args.iter().map(|&a| func.ty(a)).collect();
    let space = access::index_space(&types);
    let access = access::accesses(space.len(), &types);
    (space, access)
}

/// The program that reads input 0.
fn identity(dtype: crate::ir::DType) -> ScalarProgram {
    ScalarProgram {
        insts: vec![ScalarInst {
            op: ScalarOp::Input(0),
            args: vec![],
            dtype,
        }],
        outputs: vec![0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(src: &str) -> Plan {
        let f = crate::ir::text::parse("t.kir", src).unwrap().remove(0);
        lower(&f)
    }

    #[test]
    fn step_ids_are_positions_in_all_steps_branches_and_groups_included() {
        let f = crate::ir::text::parse(
            "t.kir",
            "func @f(%c: bool[], %x: f32[8, 4]) -> (f32[8, 4], f32[8]) {
               %a = exp %x
               %s = sum %a {axes = [1]}
               %r = ifelse %c {
                 %p = neg %a
                 %q = tanh %p
                 yield %q
               } else {
                 %n = sin %a
                 yield %n
               }
               %m = max %r {axes = [1]}
               return %r, %m
             }",
        )
        .unwrap()
        .remove(0);
        for opts in [LowerOptions::default(), LowerOptions::all()] {
            let p = lower_with(&f, opts);
            let all = p.all_steps();
            assert_eq!(all.len(), p.n_steps);
            for (k, s) in all.iter().enumerate() {
                assert_eq!(s.id, StepId(k as u32), "{p}");
            }
        }
    }

    #[test]
    fn steps_get_their_kernels_and_frees() {
        let p = plan_of(
            "func @f(%x: f32[2, 3], %w: f32[3, 3]) -> (f32[2, 3], f32[2, 1]) {
               %a = matmul %x, %w
               %b = tanh %a
               %m = max %b {axes = [1], keepdims = true}
               %t = transpose %b {perm = [1, 0]}
               %i = argmax %t {axes = [0]}
               return %b, %m
             }",
        );
        let text = p.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("= gemm %0, %1"), "{text}");
        assert!(
            lines[2].contains("= map tanh %2 {") && lines[2].ends_with("; frees %2"),
            "{text}"
        );
        assert!(
            lines[3].contains("reduce max axes [1] keepdims %3 {"),
            "{text}"
        );
        assert!(lines[4].contains("view transpose %3 [1, 0]"), "{text}");
        // `%b` is an output: never freed, although the transpose reads it last.
        assert!(!lines[4].contains("frees"), "{text}");
        assert!(
            lines[5].contains("reduce argmax axes [0] %5") && lines[5].ends_with("; frees %5"),
            "{text}"
        );
    }

    #[test]
    fn transposes_read_only_by_a_matmul_fold_into_it() {
        let f = crate::ir::text::parse(
            "t.kir",
            "func @f(%x: f32[4, 3], %w: f32[4, 5], %v: f32[2, 5, 5]) -> (f32[3, 5], f32[5, 3], f32[2, 5, 5]) {
               %xt = transpose %x {perm = [1, 0]}
               %a = matmul %xt, %w
               %wt = transpose %w {perm = [1, 0]}
               %b = matmul %wt, %x
               %c = add %wt, %wt
               %vt = transpose %v {perm = [0, 2, 1]}
               %d = matmul %vt, %vt
               return %a, %b, %d
             }",
        )
        .unwrap()
        .remove(0);
        let plain = lower(&f).to_string();
        assert_eq!(plain.matches("view transpose").count(), 3, "{plain}");
        let p = lower_with(
            &f,
            LowerOptions {
                fold_transposes: true,
                row_groups: false,
                gemm_updates: false,
                fold_broadcasts: false,
            },
        );
        let text = p.to_string();
        // `%xt` folds; `%wt` has other readers and `%vt` is read twice: both stay.
        assert_eq!(text.matches("view transpose").count(), 2, "{text}");
        assert!(text.contains("gemm %0^T, %1"), "{text}");
        let folded = p.steps.iter().filter(
            |s| matches!(s.kernel, Kernel::Gemm { transposed, .. } if transposed != [false; 2]),
        );
        assert_eq!(folded.count(), 1, "{text}");
        // `%x` is read by the folded gemm now, and by the second one.
        assert!(!p.steps[0].frees.contains(&f.params[0]), "{text}");
    }

    #[test]
    fn branches_are_plans_of_their_own() {
        let p = plan_of(
            "func @f(%c: bool[], %x: f32[4]) -> (f32[4]) {
               %e = exp %x
               %y = ifelse %c {
                 %s = sin %e
                 %t = neg %s
                 yield %t
               } else {
                 yield %e
               }
               %z = add %y, %x
               return %z
             }",
        );
        let Kernel::IfElse { then, otherwise } = &p.steps[1].kernel else {
            panic!("{p}")
        };
        let (then, otherwise) = (&then.steps, &otherwise.steps);
        assert_eq!(then.len(), 2);
        assert!(otherwise.is_empty());
        // `%s` dies inside the branch; `%t` is yielded; `%e` is read by the ifelse (inside it).
        assert_eq!(then[1].frees.len(), 1, "{p}");
        assert!(then[1].frees.contains(&then[0].results[0]));
        assert!(p.to_string().contains("yield %2"), "{p}");
        assert!(p.steps[1].frees.contains(&p.steps[0].results[0]), "{p}");
        assert_eq!(p.all_steps().len(), 5);
    }
}
