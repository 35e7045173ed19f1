//! The GPU backend's code generator (feature `gpu`): the plan's map and reduce kernels as LLVM
//! IR, optimized by LLVM's O3 pipeline and written as PTX by the NVPTX target (LLVM 19 through
//! `inkwell`). It needs no GPU: `kiln ptx` and the tests run it anywhere.
//!
//! Gemm steps (cuBLAS) and perform steps (the host) are not kernels, except random ops (`random.rs`: uniform and Bernoulli), gathers (`gather.rs`:
//! `take`, `take_along_axis`), scatters (`scatter.rs`), running sums (`running.rs`: `cumsum`,
//! `cumprod`), `one_hot` (`one_hot.rs`), `conv2d` with its gradients (`conv.rs`), pooling
//! with its gradients (`pool.rs`), sorts (`sort.rs`) and `concat` (`concat.rs`); the
//! module holds one entry per such step of the plan, branches of `ifelse` included. See docs/gpu.md for the kernel ABI and what is not done yet.
//!
//! Files: `gen.rs` (the LLVM context and intrinsics), `kernel.rs` (entries, loads and stores,
//! index arithmetic, loops), `scalar.rs` (scalar ops), `math_llvm.rs` (the shared math
//! expansions), `map.rs` and `reduce.rs` (the two kernel kinds), `rows.rs` (a row group as one
//! kernel, one block per row), `target.rs` (NVPTX target
//! machine and PTX emission), `launch.rs` (the kernel parameters for given inputs),
//! `host.rs` (the same kernels compiled for the CPU: the test oracle), `cuda.rs` (the CUDA
//! driver: memory, modules, launches), `device.rs` (device arrays and the kernel launcher),
//! `runtime.rs` (`Backend::Gpu`).

mod blas;
pub mod capture;
mod concat;
mod conv;
pub mod cuda;
pub mod device;
mod float_divmod;
mod gather;
mod gen;
pub mod host;
mod kernel;
pub mod launch;
mod map;
mod math_llvm;
mod one_hot;
mod ops;
mod pool;
mod pow;
mod random;
mod reduce;
mod rem_pio2;
mod replay;
mod rows;
mod running;
pub mod runtime;
mod scalar;
mod scatter;
mod sort;
mod target;

pub use target::{ARCHS, DEFAULT_ARCH};

use crate::dump::DumpOptions;
use crate::error::{Error, Result};
use crate::ir::{DType, Func, ReduceOp, Value};
use crate::lower::{Kernel, Plan, Step, StepId};
use inkwell::context::Context;

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// An elementwise program (`map.rs`): one thread per output element.
    Map,
    /// A reduction with its fused prologue (`reduce.rs`).
    Reduce,
    /// A random op's elements (`random.rs`).
    Random,
    /// `take` or `take_along_axis` (`gather.rs`): a flag pointer follows the inputs.
    Gather(gather::Gather),
    /// `cumsum`, `cumprod` or `cumprod`'s gradient (`running.rs`).
    Running(running::Running),
    /// `one_hot` (`one_hot.rs`) of this depth.
    OneHot(usize),
    /// `scatter_add` or `scatter_set` (`scatter.rs`): a flag pointer follows the inputs.
    Scatter(scatter::Scatter),
    /// `conv2d` (`conv.rs`).
    Conv(crate::ir::window::Conv2d),
    /// Pooling, or with `true` its gradient (`pool.rs`).
    Pool(crate::ir::window::Pool2d, bool),
    /// `conv2d`'s image gradient (`false`, for an image of these dims) or filter gradient
    /// (`true`, for filters of these dims) (`conv.rs`).
    ConvGrad(crate::ir::window::Conv2d, bool, [usize; 2]),
    /// `sort` or `argsort` (`sort.rs`): two scratch arrays of i64 follow the inputs.
    Sort(sort::Sort),
    /// `concat` along this axis (`concat.rs`).
    Concat(usize),
    /// A row group (`rows.rs`): one block per index over the first `kept` axes of
    /// `out_shape`, its frame.
    Rows(usize),
}

/// One kernel entry of the module and the step it computes.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    /// The `.entry` name.
    pub name: String,
    /// What it computes, which says what its parameters are.
    pub kind: KernelKind,
    /// The step it computes.
    pub step: StepId,
    /// The step's first result.
    pub result: Value,
    /// Rank of the index space (map: the output; reduce: the value before reduction).
    pub rank: usize,
    /// The dtype of each output.
    pub out_dtypes: Vec<DType>,
    /// For a reduction: what it reduces, over which axes (sorted), keeping dims or not.
    pub reduce: Option<(ReduceOp, Vec<usize>, bool)>,
    /// The index space where the kernel fixes it, not its inputs: a random op's output shape,
    /// a row group's frame (its rows, then a row's shape).
    pub out_shape: Option<Vec<usize>>,
    /// Each output's shape where the kernel fixes them (a row group's results, which differ);
    /// empty when every output has the launch's `out_shape`.
    pub result_shapes: Vec<Vec<usize>>,
    /// The argument whose buffer a map kernel's result 0 may be written over (the kernel was
    /// compiled for that aliasing: the step's in-place mark); `None` for other kernels.
    pub inplace: Option<usize>,
}

impl KernelInfo {
    /// Whether the kernel takes, after its inputs, a flag it sets on an index out of range.
    pub fn checks_indices(&self) -> bool {
        matches!(self.kind, KernelKind::Gather(_) | KernelKind::Scatter(_))
    }

    /// The step on the host (`perform`): for a kernel that flagged an index out of range
    /// (`perform`'s error names it) or that has no element to compute but indices to check.
    pub fn on_host(
        &self,
        inputs: &[crate::tensor::TensorRef<'_>],
    ) -> Result<crate::tensor::Tensor> {
        match self.kind {
            KernelKind::Scatter(s) => scatter::scatter_on_host(s, inputs),
            KernelKind::Gather(g) if inputs.len() == 2 => {
                gather::gather_on_host(g, &inputs[0], &inputs[1])
            }
            _ => Err(Error::Runtime(format!("{}: no host form", self.name))),
        }
    }

    /// How many scratch arrays of one i64 per output element the kernel takes after its
    /// inputs (a sort's positions and their merge buffer).
    pub fn scratch_arrays(&self) -> usize {
        match self.kind {
            KernelKind::Sort(_) => 2,
            _ => 0,
        }
    }

    /// The shape of output `o` for `launch`.
    pub fn result_shape<'a>(&'a self, o: usize, launch: &'a launch::Launch) -> &'a [usize] {
        self.result_shapes.get(o).unwrap_or(&launch.out_shape)
    }

    /// The error of a kernel that flagged an index out of range.
    pub fn index_error(&self, inputs: &[crate::tensor::TensorRef<'_>]) -> Error {
        match self.on_host(inputs) {
            Err(e) => e,
            Ok(_) => Error::Runtime(format!(
                "{}: the kernel found an index out of range that perform accepts",
                self.name
            )),
        }
    }
}

/// The PTX of one function.
#[derive(Clone, Debug)]
pub struct PtxModule {
    /// The GPU architecture it was written for (`sm_90`).
    pub arch: String,
    /// The PTX text the CUDA driver loads.
    pub ptx: String,
    /// The LLVM IR as generated (before optimization), verified.
    pub llvm: String,
    /// The LLVM IR after the O3 pipeline, from which the PTX was written.
    pub llvm_optimized: String,
    /// Its kernel entries, each with the step it computes.
    pub kernels: Vec<KernelInfo>,
}

/// PTX for the optimized function `func`, for the GPU architecture `arch` (`sm_80`, `sm_90`, ...).
/// Dumps the `schedule`, `llvm` and `ptx` stages when `dump` asks for them.
pub fn compile_ptx(func: &Func, arch: &str, dump: &DumpOptions) -> Result<PtxModule> {
    let plan = plan_of(func);
    dump.dump(&func.name, "schedule", || plan.to_string());
    let m = ptx_for_plan(func, &plan, arch)?;
    dump.dump(&func.name, "llvm", || m.llvm.clone());
    dump.dump(&func.name, "ptx", || m.ptx.clone());
    Ok(m)
}

/// PTX for the kernels of `plan` (lowered from `func`).
pub fn ptx_for_plan(func: &Func, plan: &Plan, arch: &str) -> Result<PtxModule> {
    let tm = target::machine(arch)?;
    let ctx = Context::create();
    let g = gen::Gen::new(&ctx, &func.name);
    let kernels = define_kernels(&g, func, plan)?;
    g.module
        .verify()
        .map_err(|e| Error::Unsupported(format!("ptx backend: invalid LLVM IR: {e}")))?;
    let llvm = g.module.print_to_string().to_string();
    let ptx = target::optimize_and_emit(&g.module, &tm)?;
    let llvm_optimized = g.module.print_to_string().to_string();
    Ok(PtxModule {
        arch: arch.to_string(),
        ptx,
        llvm,
        llvm_optimized,
        kernels,
    })
}

/// The GPU's plan of the optimized `func`: the CPU's lowering choices (row groups, which
/// become one kernel each; products with their transposes folded and gradient updates fused,
/// which cuBLAS takes; broadcasts the kernels read through strides).
pub fn plan_of(func: &Func) -> Plan {
    crate::lower::lower_with(func, crate::lower::LowerOptions::all())
}

/// Defines the kernel of every step of `plan` that has one, in `Plan::all_steps` order: a row
/// group's members only where the group has no kernel of its own (they run one by one then).
pub(crate) fn define_kernels(g: &gen::Gen, func: &Func, plan: &Plan) -> Result<Vec<KernelInfo>> {
    let base = symbol_base(func);
    let mut kernels = Vec::new();
    let mut grouped = std::collections::HashSet::new();
    for step in plan.all_steps() {
        if grouped.contains(&step.id) {
            continue;
        }
        let k = step.id.index();
        if let Some(info) = define_step(g, func, step, &format!("{base}_{k}"))? {
            if let Kernel::Rows { steps, .. } = &step.kernel {
                grouped.extend(steps.iter().map(|m| m.id));
            }
            kernels.push(info);
        }
    }
    Ok(kernels)
}

/// The function's name as the start of kernel symbols.
fn symbol_base(func: &Func) -> String {
    func.name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The kernel of one step, if it has one.
pub(crate) fn define_step(
    g: &gen::Gen,
    func: &Func,
    step: &Step,
    name: &str,
) -> Result<Option<KernelInfo>> {
    let in_dtypes = step.args.iter().map(|&a| func.ty(a).dtype).collect();
    let context = |e: Error| match e {
        Error::Unsupported(m) => Error::Unsupported(format!(
            "{}: {} (%{}): {m}",
            func.name,
            step.op.display_name(),
            step.results[0].0
        )),
        other => other,
    };
    let (kind, rank, name, out_dtypes, reduce) = match &step.kernel {
        Kernel::Map { program, space, .. } => {
            let rank = space.len();
            let name = format!("{name}_map");
            let spec = map::MapSpec {
                program,
                in_dtypes,
                rank,
                inplace: step.inplace,
            };
            map::define_map(g, &name, &spec).map_err(context)?;
            let outs = program
                .outputs
                .iter()
                .map(|&o| program.insts[o].dtype)
                .collect();
            (KernelKind::Map, rank, name, outs, None)
        }
        Kernel::Reduce { op, program, .. }
            if !reduce::has_kernel(*op, program.insts[program.outputs[0]].dtype) =>
        {
            return Ok(None)
        }
        Kernel::Reduce {
            op,
            axes,
            keepdims,
            program,
            space,
            ..
        } => {
            // The plan's index space; its axes are normalized (sorted, in range) by the IR.
            let rank = space.len();
            let axes: Vec<usize> = match axes {
                Some(a) => a.clone(),
                None => (0..rank).collect(),
            };
            let name = format!("{name}_reduce");
            let spec = reduce::ReduceSpec {
                op: *op,
                program,
                in_dtypes,
                rank,
                axes,
            };
            reduce::define_reduce(g, &name, &spec).map_err(context)?;
            let out = reduce::out_dtype(&spec).map_err(context)?;
            let what = (*op, spec.axes, *keepdims);
            (KernelKind::Reduce, rank, name, vec![out], Some(what))
        }
        Kernel::Perform => match &step.op {
            crate::ir::Op::Random {
                dist,
                seed,
                shape,
                dtype,
            } => {
                let name = format!("{name}_random");
                let counter = !step.args.is_empty();
                random::define_random(g, &name, *dist, *seed, *dtype, counter).map_err(context)?;
                let info = KernelInfo {
                    name,
                    kind: KernelKind::Random,
                    step: step.id,
                    result: step.results[0],
                    rank: shape.len(),
                    out_dtypes: vec![*dtype],
                    reduce: None,
                    out_shape: Some(shape.clone()),
                    result_shapes: Vec::new(),
                    inplace: None,
                };
                return Ok(Some(info));
            }
            _ => match ops::define_op(g, func, step, name).map_err(context)? {
                Some(d) => (d.kind, d.rank, d.name, vec![d.out], None),
                None => return Ok(None),
            },
        },
        Kernel::Rows { .. } => {
            // A group this kernel does not take runs its members' kernels.
            let Some(spec) = rows::RowsSpec::of(func, step) else {
                return Ok(None);
            };
            let name = format!("{name}_rows");
            rows::define_rows(g, &name, &spec).map_err(context)?;
            return Ok(Some(KernelInfo {
                name,
                kind: KernelKind::Rows(spec.kept),
                step: step.id,
                result: step.results[0],
                rank: spec.frame.len(),
                out_dtypes: spec.out_dtypes(),
                reduce: None,
                out_shape: Some(spec.frame.clone()),
                result_shapes: spec.result_shapes.clone(),
                inplace: None,
            }));
        }
        Kernel::Gemm { .. } | Kernel::View(_) | Kernel::IfElse { .. } | Kernel::Scan { .. } => {
            return Ok(None)
        }
    };
    Ok(Some(KernelInfo {
        name,
        kind,
        step: step.id,
        result: step.results[0],
        rank,
        out_dtypes,
        reduce,
        out_shape: None,
        result_shapes: Vec::new(),
        inplace: step.inplace.filter(|_| kind == KernelKind::Map),
    }))
}

/// A `Function` of `func` (verified, then optimized when `optimize`) running on the executable
/// `make` builds: the host oracle's and the GPU's, for tests.
pub(crate) fn function_with(
    func: Func,
    optimize: bool,
    make: impl FnOnce(&Func) -> Result<Box<dyn crate::runtime::Executable>>,
) -> Result<crate::Function> {
    crate::ir::verify::verify(&func).map_err(|es| Error::Input(es.join("; ")))?;
    let options = crate::rewrite::OptimizeOptions {
        optimize,
        dump: DumpOptions::default(),
        ..Default::default()
    };
    let func = crate::rewrite::optimize(func, &options);
    let exec = make(&func)?;
    let (n_in, n_out) = (func.params.len(), func.outputs.len());
    Ok(crate::Function::new(func, n_in, n_out, Vec::new(), exec))
}
