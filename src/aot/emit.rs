//! From a static plan to an object file: constants as read-only data, one map kernel per
//! distinct scalar program (`codegen::clif::map::define_map_kernel`, the JIT's own), the
//! library kernels of `kernels`, and the entry point, which walks the plan's steps with
//! compile-time shapes and strides, building each kernel call's pointer and stride arrays in
//! a stack slot.

use super::clif::{define, for_lt, mem, offset, signature};
use super::gather::{bits_type, check_indices, gather, scatter, Axis};
use super::kernels::{define_helpers, define_matmul, runtime_gemm, RUNTIME_PREFIX};
use super::plan::{collapse, Loc, Plan, Step, View};
use super::sort::define_sort;
use crate::codegen::clif::map::{define_map_kernel, Bcast};
use crate::codegen::clif::math_clif::ClifMath;
use crate::codegen::clif::nd_seek;
use crate::codegen::clif::random::define_random_kernel;
use crate::codegen::clif::reduce::{define_reduce_kernel, is_arg, ReduceKernelInfo, VectorLeaves};
use crate::codegen::clif::reduce_call::{output_strides, plan_call, KernelOffers};
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::{DType, RandomDist, ReduceOp};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, FuncRef, InstBuilder, StackSlotData, StackSlotKind, Type, Value,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{DataDescription, FuncId, Linkage, Module};
use cranelift_object::{ObjectBuilder, ObjectModule};
use std::collections::HashMap;
use std::fmt::Write as _;

/// What emitting produced: the object file's bytes and texts for the dumps.
pub struct Emitted {
    pub object: Vec<u8>,
    pub kernels: String,
    pub clif: String,
    /// Symbols the object leaves undefined (from the C math library).
    pub imports: Vec<String>,
    /// Symbols the object takes from kiln's runtime library (`libkiln_rt.a`).
    pub runtime: Vec<String>,
}

/// Kernels and library functions, defined once each.
struct Library {
    maps: HashMap<(ScalarProgram, usize), FuncId>,
    /// Reduction kernels by op, prologue and input count.
    reductions: HashMap<(ReduceOp, ScalarProgram, usize, bool), ReduceKernelInfo>,
    matmuls: HashMap<DType, FuncId>,
    /// Random kernels by distribution and dtype.
    randoms: HashMap<String, FuncId>,
    sorts: HashMap<DType, FuncId>,
    kernels: String,
    clif: String,
    /// Whether float products call kiln's runtime library, and kernels its math functions
    /// (`AotOptions::runtime`).
    runtime: bool,
}

impl Library {
    fn map(
        &mut self,
        module: &mut ObjectModule,
        symbol: &str,
        program: &ScalarProgram,
        n_in: usize,
        what: &str,
    ) -> Result<FuncId> {
        let key = (program.clone(), n_in);
        if let Some(&id) = self.maps.get(&key) {
            return Ok(id);
        }
        let name = format!("{symbol}_k{}", self.maps.len());
        let (id, text) = define_map_kernel(module, &name, program, n_in, self.runtime)
            .map_err(|e| Error::Unsupported(format!("{what}: cannot compile the kernel: {e}")))?;
        let _ = writeln!(self.kernels, "{name}: map, {n_in} inputs: {program}");
        self.clif.push_str(&text);
        self.clif.push('\n');
        self.maps.insert(key, id);
        Ok(id)
    }

    /// The JIT's reduction kernel for `op` of what `program` computes from `n_in` inputs,
    /// with host math only where the object links kiln's runtime library; with cursor leaves (`nd`) where the reduced dims may not merge, as
    /// the JIT decides it: only several reduced axes can fail to.
    #[allow(clippy::too_many_arguments)]
    fn reduction(
        &mut self,
        module: &mut ObjectModule,
        symbol: &str,
        op: ReduceOp,
        program: &ScalarProgram,
        n_in: usize,
        nd: bool,
        what: &str,
    ) -> Result<ReduceKernelInfo> {
        let key = (op, program.clone(), n_in, nd);
        if let Some(info) = self.reductions.get(&key) {
            return Ok(info.clone());
        }
        let name = format!("{symbol}_r{}", self.reductions.len());
        // Nothing about the operands' layout is assumed: the kernel checks at run time.
        let along = vec![Bcast::Unknown; n_in];
        let info = define_reduce_kernel(
            module,
            &name,
            op,
            program,
            &along,
            nd,
            VectorLeaves::Both,
            self.runtime,
        )
        .map_err(|e| Error::Unsupported(format!("{what}: cannot compile the kernel: {e}")))?;
        let _ = writeln!(
            self.kernels,
            "{name}: reduce {}, {n_in} inputs: {program}",
            op.name()
        );
        self.clif.push_str(&info.clif);
        self.clif.push('\n');
        self.reductions.insert(key, info.clone());
        Ok(info)
    }

    fn random(
        &mut self,
        module: &mut ObjectModule,
        symbol: &str,
        dist: RandomDist,
        dtype: DType,
    ) -> Result<FuncId> {
        let key = format!("{dist:?} {dtype}");
        if let Some(&id) = self.randoms.get(&key) {
            return Ok(id);
        }
        let name = format!("{symbol}_rand{}", self.randoms.len());
        let (id, text) = define_random_kernel(module, &name, dist, dtype)?;
        let _ = writeln!(self.kernels, "{name}: {} of {dtype}", dist.name());
        self.clif.push_str(&text);
        self.clif.push('\n');
        self.randoms.insert(key, id);
        Ok(id)
    }

    fn sort(&mut self, module: &mut ObjectModule, symbol: &str, d: DType) -> Result<FuncId> {
        if let Some(&id) = self.sorts.get(&d) {
            return Ok(id);
        }
        let name = format!("{symbol}_sort_{d}");
        let id = define_sort(module, &name, d, &mut self.clif)?;
        let _ = writeln!(self.kernels, "{name}: stable merge sort of a lane of {d}");
        self.sorts.insert(d, id);
        Ok(id)
    }

    fn matmul(&mut self, module: &mut ObjectModule, symbol: &str, d: DType) -> Result<FuncId> {
        if let Some(&id) = self.matmuls.get(&d) {
            return Ok(id);
        }
        let name = format!("{symbol}_matmul_{d}");
        let id = define_matmul(module, &name, d, self.runtime, &mut self.clif)?;
        let via = match runtime_gemm(d).filter(|_| self.runtime) {
            Some(gemm) => {
                format!(" ({gemm} of kiln's runtime library; the loop nest without AVX2)")
            }
            None => String::new(),
        };
        let _ = writeln!(self.kernels, "{name}: matrix product of {d}{via}");
        self.matmuls.insert(d, id);
        Ok(id)
    }
}

/// The functions one step calls, declared beforehand.
enum StepFns {
    Map(FuncId),
    Reduce(ReduceKernelInfo),
    MatMul(FuncId),
    IfElse(Vec<StepFns>, Vec<StepFns>),
    Random(FuncId),
    /// Code written into the entry point itself (gathers, scatters).
    Inline,
    Sweep(Box<StepFns>),
    Sort(FuncId),
    Loop(Vec<StepFns>),
}

impl Library {
    /// Defines the kernels `steps` call (those of branches included) and notes in `max_ops`
    /// the most operands a kernel call passes.
    fn declare(
        &mut self,
        module: &mut ObjectModule,
        symbol: &str,
        steps: &[Step],
        max_ops: &mut usize,
    ) -> Result<Vec<StepFns>> {
        let mut fns = Vec::new();
        for step in steps {
            fns.push(match step {
                Step::Map {
                    what,
                    program,
                    inputs,
                    outputs,
                    ..
                } => {
                    *max_ops = (*max_ops).max(inputs.len() + outputs.len());
                    StepFns::Map(self.map(module, symbol, program, inputs.len(), what)?)
                }
                Step::Reduce {
                    what,
                    op,
                    program,
                    inputs,
                    reduced,
                    ..
                } => StepFns::Reduce(self.reduction(
                    module,
                    symbol,
                    *op,
                    program,
                    inputs.len(),
                    reduced.iter().filter(|&&r| r).count() >= 2,
                    what,
                )?),
                Step::MatMul { dtype, .. } => StepFns::MatMul(self.matmul(module, symbol, *dtype)?),
                Step::Random { dist, out, .. } => {
                    StepFns::Random(self.random(module, symbol, *dist, out.dtype)?)
                }
                Step::Gather { .. } | Step::Scatter { .. } | Step::CheckIndices { .. } => {
                    StepFns::Inline
                }
                Step::Loop { body, .. } => {
                    StepFns::Loop(self.declare(module, symbol, body, max_ops)?)
                }
                Step::Sort { data, .. } => StepFns::Sort(self.sort(module, symbol, data.dtype)?),
                Step::Sweep { body, .. } => {
                    let mut body =
                        self.declare(module, symbol, std::slice::from_ref(body), max_ops)?;
                    StepFns::Sweep(Box::new(body.remove(0)))
                }
                Step::IfElse {
                    then, otherwise, ..
                } => StepFns::IfElse(
                    self.declare(module, symbol, then, max_ops)?,
                    self.declare(module, symbol, otherwise, max_ops)?,
                ),
            });
        }
        Ok(fns)
    }
}

/// Emits the object for `plan` with the entry point `symbol`; with `runtime`, float products
/// call kiln's runtime library.
pub fn emit(plan: &Plan, symbol: &str, isa: OwnedTargetIsa, runtime: bool) -> Result<Emitted> {
    let builder = ObjectBuilder::new(
        isa,
        format!("{symbol}.o"),
        cranelift_module::default_libcall_names(),
    )
    .map_err(|e| Error::Unsupported(format!("cranelift-object: {e}")))?;
    let mut module = ObjectModule::new(builder);
    let ptr = module.target_config().pointer_type();

    // Constants.
    let mut data = Vec::new();
    for (i, bytes) in plan.consts.iter().enumerate() {
        let name = format!("{symbol}_c{i}");
        let id = module
            .declare_data(&name, Linkage::Local, false, false)
            .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
        let mut d = DataDescription::new();
        // An empty constant still gets a byte, so that its symbol has an address.
        let mut contents = bytes.clone();
        if contents.is_empty() {
            contents.push(0);
        }
        d.define(contents.into_boxed_slice());
        d.set_align(64);
        module
            .define_data(id, &d)
            .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
        data.push(id);
    }

    // Kernels.
    let mut lib = Library {
        maps: HashMap::new(),
        reductions: HashMap::new(),
        matmuls: HashMap::new(),
        randoms: HashMap::new(),
        sorts: HashMap::new(),
        kernels: String::new(),
        clif: String::new(),
        runtime,
    };
    let mut max_ops = 1;
    let fns = lib.declare(&mut module, symbol, &plan.steps, &mut max_ops)?;

    // The entry point.
    let n_in = plan.inputs.len();
    let n_out = plan.outputs.len();
    let n_params = n_in + n_out + (plan.scratch_bytes > 0) as usize;
    let sig = signature(&module, &vec![ptr; n_params], &[types::I32]);
    let (_, text) = define(
        &mut module,
        symbol,
        Linkage::Export,
        sig,
        |module, _, b, params| {
            let mut consts = Vec::new();
            for &id in &data {
                let gv = module.declare_data_in_func(id, b.func);
                consts.push(b.ins().symbol_value(ptr, gv));
            }
            let slot = b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                (3 * max_ops * 8) as u32,
                3,
            ));
            let slot = b.ins().stack_addr(ptr, slot, 0);
            let mut d = Driver {
                b,
                params: params.to_vec(),
                n_in,
                consts,
                refs: HashMap::new(),
                slot,
                max_ops,
                ptr,
                steps_now: HashMap::new(),
            };
            d.steps(module, plan, &plan.steps, &fns)?;
            let ok = d.b.ins().iconst(types::I32, 0);
            d.b.ins().return_(&[ok]);
            Ok(())
        },
    )?;
    lib.clif.push_str(&text);

    if let Some(text) = nd_seek::define_nd_seek_if_used(&mut module)? {
        let _ = writeln!(
            lib.kernels,
            "{}: the reductions' cursor seek",
            nd_seek::SEEK
        );
        lib.clif.push_str(&text);
    }
    let helpers = define_helpers(&mut module, &mut lib.clif)?;
    for h in &helpers {
        let _ = writeln!(lib.kernels, "{h}: helper");
    }
    let (mut runtime, mut imports): (Vec<String>, Vec<String>) = module
        .declarations()
        .get_functions()
        .filter(|(_, d)| d.linkage == Linkage::Import)
        .filter_map(|(_, d)| d.name.clone())
        .partition(|name| name.starts_with(RUNTIME_PREFIX));
    imports.sort();
    runtime.sort();
    let product = module.finish();
    let object = product
        .emit()
        .map_err(|e| Error::Unsupported(format!("writing the object file: {e}")))?;
    Ok(Emitted {
        object,
        kernels: lib.kernels,
        clif: lib.clif,
        imports,
        runtime,
    })
}

struct Driver<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    params: Vec<Value>,
    n_in: usize,
    consts: Vec<Value>,
    refs: HashMap<FuncId, FuncRef>,
    /// The address of the stack slot holding a kernel call's pointers, then its outer
    /// strides, then its inner strides (`max_ops` entries each).
    slot: Value,
    max_ops: usize,
    ptr: Type,
    /// The current step of each loop being emitted, by loop id.
    steps_now: HashMap<usize, Value>,
}

impl Driver<'_, '_> {
    fn func_ref(&mut self, module: &mut ObjectModule, id: FuncId) -> FuncRef {
        *self
            .refs
            .entry(id)
            .or_insert_with(|| module.declare_func_in_func(id, self.b.func))
    }

    /// Each of `views` read over `shape` (stride 0 where it broadcasts): its first element's
    /// address and its byte strides.
    fn map_operands<'v>(
        &mut self,
        plan: &Plan,
        what: &str,
        shape: &[usize],
        views: impl Iterator<Item = &'v View>,
    ) -> Result<Vec<(Value, Vec<i64>)>> {
        let mut ops = Vec::new();
        for v in views {
            let st = v.broadcast_strides(shape).ok_or_else(|| {
                Error::Unsupported(format!(
                    "{what}: cannot broadcast {:?} to {shape:?}",
                    v.shape
                ))
            })?;
            ops.push((self.base(plan, v)?, st));
        }
        Ok(ops)
    }

    /// The address of the first element of `v`.
    fn base(&mut self, plan: &Plan, v: &View) -> Result<Value> {
        let root = self.root_address(plan, v.root)?;
        Ok(if v.offset == 0 {
            root
        } else {
            self.b.ins().iadd_imm_s(root, v.offset)
        })
    }

    /// The address of root `r` (for a loop's slice, at the loop's current step).
    fn root_address(&mut self, plan: &Plan, r: usize) -> Result<Value> {
        Ok(match plan.roots[r].loc {
            Some(Loc::Slice { of, stride, looped }) => {
                let whole = self.root_address(plan, of)?;
                let t = *self.steps_now.get(&looped).ok_or_else(|| {
                    Error::Unsupported(format!("internal: r{r} is read outside its loop"))
                })?;
                offset(self.b, whole, t, stride)
            }
            Some(Loc::Input(i)) => self.params[i],
            Some(Loc::Output(o)) => self.params[self.n_in + o],
            Some(Loc::Const(c)) => self.consts[c],
            Some(Loc::Scratch(off)) => match self.params.get(self.n_in + plan.outputs.len()) {
                Some(&s) => self.b.ins().iadd_imm_s(s, off as i64),
                // No scratch area: the buffer is empty and never read.
                None => self.b.ins().iconst(self.ptr, 0),
            },
            None => {
                return Err(Error::Unsupported(format!(
                    "internal: buffer r{r} was not placed"
                )))
            }
        })
    }

    fn steps(
        &mut self,
        module: &mut ObjectModule,
        plan: &Plan,
        steps: &[Step],
        fns: &[StepFns],
    ) -> Result<()> {
        for (step, f) in steps.iter().zip(fns) {
            self.step(module, plan, step, f)?;
        }
        Ok(())
    }

    fn step(
        &mut self,
        module: &mut ObjectModule,
        plan: &Plan,
        step: &Step,
        f: &StepFns,
    ) -> Result<()> {
        match (step, f) {
            (
                Step::Map {
                    shape,
                    inputs,
                    outputs,
                    what,
                    ..
                },
                StepFns::Map(id),
            ) => {
                let f = self.func_ref(module, *id);
                let ops = self.map_operands(plan, what, shape, inputs.iter().chain(outputs))?;
                map_call(self.b, f, self.slot, self.max_ops, shape, &ops)
            }
            (
                Step::Sweep {
                    what,
                    count,
                    body,
                    advance,
                },
                StepFns::Sweep(inner),
            ) => {
                let (
                    Step::Map {
                        shape,
                        inputs,
                        outputs,
                        ..
                    },
                    StepFns::Map(id),
                ) = (body.as_ref(), inner.as_ref())
                else {
                    return Err(Error::Unsupported(format!(
                        "{what}: internal: a sweep of a step that is not a map"
                    )));
                };
                let f = self.func_ref(module, *id);
                let ops = self.map_operands(plan, what, shape, inputs.iter().chain(outputs))?;
                let (slot, max_ops) = (self.slot, self.max_ops);
                let zero = self.b.ins().iconst(types::I64, 0);
                let n = self.b.ins().iconst(types::I64, *count as i64);
                for_lt(self.b, zero, n, 1, |b, k| {
                    let moved: Vec<(Value, Vec<i64>)> = ops
                        .iter()
                        .zip(advance)
                        .map(|((p, st), &by)| (offset(b, *p, k, by), st.clone()))
                        .collect();
                    map_call(b, f, slot, max_ops, shape, &moved)
                })
            }
            (
                Step::Loop {
                    id,
                    count,
                    reverse,
                    body,
                    ..
                },
                StepFns::Loop(fns),
            ) => {
                // for (k = 0; k < count; k++) { t = reverse ? count - 1 - k : k; body }
                let (head, inside, exit) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                self.b.append_block_param(head, types::I64);
                let zero = self.b.ins().iconst(types::I64, 0);
                self.b.ins().jump(head, &[zero.into()]);
                self.b.switch_to_block(head);
                let k = self.b.block_params(head)[0];
                let more = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::SignedLessThan, k, *count as i64);
                self.b.ins().brif(more, inside, &[], exit, &[]);
                self.b.switch_to_block(inside);
                let t = if *reverse {
                    let last = self.b.ins().iconst(types::I64, *count as i64 - 1);
                    self.b.ins().isub(last, k)
                } else {
                    k
                };
                self.steps_now.insert(*id, t);
                self.steps(module, plan, body, fns)?;
                self.steps_now.remove(id);
                let next = self.b.ins().iadd_imm_s(k, 1);
                self.b.ins().jump(head, &[next.into()]);
                self.b.switch_to_block(exit);
                Ok(())
            }
            (
                Step::Sort {
                    what,
                    data,
                    descending,
                    values,
                    positions,
                    perm,
                    tmp,
                },
                StepFns::Sort(id),
            ) => {
                let f = self.func_ref(module, *id);
                let r = data.shape.len();
                let n = data.shape[r - 1];
                if data.numel() == 0 {
                    return Ok(());
                }
                let lanes = &data.shape[..r - 1];
                let outs: Vec<&View> = values.iter().chain(positions).collect();
                let mut views = vec![data];
                views.extend(outs.iter().copied());
                let ops = self.map_operands(plan, what, &data.shape, views.into_iter())?;
                let lane_strides: Vec<Vec<i64>> =
                    ops.iter().map(|(_, st)| st[..r - 1].to_vec()).collect();
                let along: Vec<i64> = ops.iter().map(|(_, st)| st[r - 1]).collect();
                let bases: Vec<Value> = ops.iter().map(|(p, _)| *p).collect();
                let (perm, tmp) = (self.base(plan, perm)?, self.base(plan, tmp)?);
                let desc = *descending as i64;
                let has_values = values.is_some();
                nest(self.b, lanes, &lane_strides, bases, &mut |b, p| {
                    let args = [
                        b.ins().iconst(types::I64, n as i64),
                        p[0],
                        b.ins().iconst(types::I64, along[0]),
                        perm,
                        tmp,
                        b.ins().iconst(types::I64, desc),
                    ];
                    b.ins().call(f, &args);
                    let zero = b.ins().iconst(types::I64, 0);
                    let end = b.ins().iconst(types::I64, n as i64);
                    for_lt(b, zero, end, 1, |b, k| {
                        let at = offset(b, perm, k, 8);
                        let pos = b.ins().load(types::I64, mem(), at, 0);
                        let to = offset(b, p[1], k, along[1]);
                        if has_values {
                            let ty = bits_type(data.dtype);
                            let from = b.ins().imul_imm_s(pos, along[0]);
                            let from = b.ins().iadd(p[0], from);
                            let v = b.ins().load(ty, mem(), from, 0);
                            b.ins().store(mem(), v, to, 0);
                        } else {
                            b.ins().store(mem(), pos, to, 0);
                        }
                        Ok(())
                    })
                })
            }
            (
                Step::Gather {
                    shape,
                    data,
                    index,
                    axis_len,
                    axis_stride,
                    out,
                    code,
                    what,
                },
                StepFns::Inline,
            ) => {
                let ops = self.map_operands(plan, what, shape, [data, index, out].into_iter())?;
                let axis = Axis {
                    len: *axis_len,
                    stride: *axis_stride,
                    code: *code,
                };
                gather(
                    self.b,
                    shape,
                    [ops[0].1.clone(), ops[1].1.clone(), ops[2].1.clone()],
                    [ops[0].0, ops[1].0, ops[2].0],
                    [data.dtype, index.dtype],
                    axis,
                )
            }
            (
                Step::CheckIndices {
                    what,
                    index,
                    axis_len,
                    code,
                },
                StepFns::Inline,
            ) => {
                let ops = self.map_operands(plan, what, &index.shape, [index].into_iter())?;
                let axis = Axis {
                    len: *axis_len,
                    stride: 0,
                    code: *code,
                };
                check_indices(self.b, &index.shape, &ops[0].1, ops[0].0, index.dtype, axis)
            }
            (
                Step::Scatter {
                    what,
                    shape,
                    updates,
                    index,
                    target,
                    axis_len,
                    axis_stride,
                    add,
                    code,
                },
                StepFns::Inline,
            ) => {
                let views = [updates, index, target];
                let ops = self.map_operands(plan, what, shape, views.into_iter())?;
                let axis = Axis {
                    len: *axis_len,
                    stride: *axis_stride,
                    code: *code,
                };
                scatter(
                    self.b,
                    shape,
                    [ops[0].1.clone(), ops[1].1.clone(), ops[2].1.clone()],
                    [ops[0].0, ops[1].0, ops[2].0],
                    [updates.dtype, index.dtype],
                    axis,
                    *add,
                )
            }
            (
                Step::Reduce {
                    what,
                    op,
                    space,
                    reduced,
                    inputs,
                    out,
                    ..
                },
                StepFns::Reduce(info),
            ) => {
                let f = self.func_ref(module, info.entry);
                let mut strides: Vec<Vec<i64>> = inputs.iter().map(|v| v.strides.clone()).collect();
                let es_out = out.dtype.size() as i64;
                strides.push(output_strides(space, reduced, es_out));
                let es: Vec<i64> = inputs
                    .iter()
                    .map(|v| v.dtype.size() as i64)
                    .chain([es_out])
                    .collect();
                let offers = KernelOffers {
                    lanes: info.lanes,
                    nd: info.nd,
                    arg: is_arg(*op),
                };
                let call = plan_call(space, reduced, &strides, &es, offers).ok_or_else(|| {
                    Error::Unsupported(format!(
                        "{what}: internal: no kernel call for an empty space"
                    ))
                })?;
                let mut bases = Vec::new();
                for v in inputs.iter().chain([out]) {
                    bases.push(self.base(plan, v)?);
                }
                reduce_call(self.b, f, &call, bases)
            }
            (
                Step::MatMul {
                    dtype,
                    batch,
                    m,
                    n,
                    k,
                    a,
                    b: bv,
                    c,
                    ..
                },
                StepFns::MatMul(id),
            ) => {
                let f = self.func_ref(module, *id);
                let nb = batch.len();
                let bases = vec![
                    self.base(plan, a)?,
                    self.base(plan, bv)?,
                    self.base(plan, c)?,
                ];
                let st: Vec<Vec<i64>> = [a, bv, c]
                    .iter()
                    .map(|v| v.strides[..nb].to_vec())
                    .collect();
                if m * n == 0 {
                    return Ok(());
                }
                let Some((bsh, bst)) = collapse(batch, &st) else {
                    return Ok(());
                };
                let kstep = crate::gemm::k_step(*k, crate::gemm::default_kc(*dtype)) as i64;
                let (m, n, k) = (*m as i64, *n as i64, *k as i64);
                let (a_rs, a_cs, b_rs) = (a.strides[nb], a.strides[nb + 1], bv.strides[nb]);
                let mut call = |b: &mut FunctionBuilder, ptrs: &[Value]| -> Result<()> {
                    let mut c = |x: i64| b.ins().iconst(types::I64, x);
                    let args = [
                        c(m),
                        c(n),
                        c(k),
                        c(kstep.max(1)),
                        ptrs[0],
                        c(a_rs),
                        c(a_cs),
                        ptrs[1],
                        c(b_rs),
                        ptrs[2],
                    ];
                    b.ins().call(f, &args);
                    Ok(())
                };
                nest(self.b, &bsh, &bst, bases, &mut call)
            }
            (
                Step::IfElse {
                    cond,
                    then,
                    otherwise,
                    ..
                },
                StepFns::IfElse(then_fns, else_fns),
            ) => {
                // Only the chosen branch runs (lazily, as on the JIT).
                let at = self.base(plan, cond)?;
                let taken = self.b.ins().load(types::I8, mem(), at, 0);
                let (yes, no, join) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                self.b.ins().brif(taken, yes, &[], no, &[]);
                for (block, steps, fns) in [(yes, then, then_fns), (no, otherwise, else_fns)] {
                    self.b.switch_to_block(block);
                    self.steps(module, plan, steps, fns)?;
                    self.b.ins().jump(join, &[]);
                }
                self.b.switch_to_block(join);
                Ok(())
            }
            (
                Step::Random {
                    seed, counter, out, ..
                },
                StepFns::Random(id),
            ) => {
                let f = self.func_ref(module, *id);
                let seed = match counter {
                    Some(c) => {
                        let at = self.base(plan, c)?;
                        let c = self.b.ins().load(types::I64, mem(), at, 0);
                        let s = self.b.ins().iconst(types::I64, *seed as i64);
                        let mut e = ClifMath::new(self.b, module, types::F64, None);
                        crate::random::stream::mix_counter(&mut e, s, c)
                    }
                    None => self.b.ins().iconst(types::I64, *seed as i64),
                };
                let at = self.base(plan, out)?;
                let n = self.b.ins().iconst(types::I64, out.numel() as i64);
                self.b.ins().call(f, &[at, n, seed]);
                Ok(())
            }
            _ => Err(Error::Unsupported(
                "internal: a step and its kernels do not match".into(),
            )),
        }
    }
}

/// Loops over `sizes` (the outermost first), advancing each operand's pointer by its stride,
/// and runs `inner` with the pointers at each index.
pub(super) fn nest(
    b: &mut FunctionBuilder,
    sizes: &[usize],
    strides: &[Vec<i64>],
    ptrs: Vec<Value>,
    inner: &mut dyn FnMut(&mut FunctionBuilder, &[Value]) -> Result<()>,
) -> Result<()> {
    if sizes.is_empty() {
        return inner(b, &ptrs);
    }
    let zero = b.ins().iconst(types::I64, 0);
    let n = b.ins().iconst(types::I64, sizes[0] as i64);
    for_lt(b, zero, n, 1, |b, i| {
        let next: Vec<Value> = ptrs
            .iter()
            .zip(strides)
            .map(|(&p, st)| offset(b, p, i, st[0]))
            .collect();
        let rest: Vec<Vec<i64>> = strides.iter().map(|s| s[1..].to_vec()).collect();
        nest(b, &sizes[1..], &rest, next, inner)
    })
}

/// Calls map kernel `f` over `shape`, each operand (inputs, then outputs) at its base pointer
/// and byte strides: dims are collapsed where every operand allows, the last two go to the
/// kernel as rows and columns, and any before them become loops here.
fn map_call(
    b: &mut FunctionBuilder,
    f: FuncRef,
    slot: Value,
    max_ops: usize,
    shape: &[usize],
    ops: &[(Value, Vec<i64>)],
) -> Result<()> {
    let strides: Vec<Vec<i64>> = ops.iter().map(|o| o.1.clone()).collect();
    let Some((sh, st)) = collapse(shape, &strides) else {
        return Ok(());
    };
    let r = sh.len();
    let lead = r.saturating_sub(2);
    let (rows, cols, outer, inner): (usize, usize, Vec<i64>, Vec<i64>) = match r - lead {
        0 => (1, 1, vec![0; ops.len()], vec![0; ops.len()]),
        1 => (
            1,
            sh[lead],
            vec![0; ops.len()],
            st.iter().map(|s| s[lead]).collect(),
        ),
        _ => (
            sh[lead],
            sh[lead + 1],
            st.iter().map(|s| s[lead]).collect(),
            st.iter().map(|s| s[lead + 1]).collect(),
        ),
    };
    let lead_st: Vec<Vec<i64>> = st.iter().map(|s| s[..lead].to_vec()).collect();
    let bases: Vec<Value> = ops.iter().map(|o| o.0).collect();
    let mut call = |b: &mut FunctionBuilder, ptrs: &[Value]| -> Result<()> {
        let w = 8 * max_ops as i32;
        for (j, &p) in ptrs.iter().enumerate() {
            let j8 = 8 * j as i32;
            b.ins().store(mem(), p, slot, j8);
            let o = b.ins().iconst(types::I64, outer[j]);
            b.ins().store(mem(), o, slot, w + j8);
            let i = b.ins().iconst(types::I64, inner[j]);
            b.ins().store(mem(), i, slot, 2 * w + j8);
        }
        let rows = b.ins().iconst(types::I64, rows as i64);
        let cols = b.ins().iconst(types::I64, cols as i64);
        let outer_at = b.ins().iadd_imm_s(slot, w as i64);
        let inner_at = b.ins().iadd_imm_s(slot, 2 * w as i64);
        b.ins().call(f, &[rows, cols, slot, outer_at, inner_at]);
        Ok(())
    };
    nest(b, &sh[..lead], &lead_st, bases, &mut call)
}

/// Calls reduction kernel `f` as `call` says (`reduce_call`): the stride arrays are stored once
/// in a stack slot of their own, the operands' pointers for each index of the outer kept dims.
fn reduce_call(
    b: &mut FunctionBuilder,
    f: FuncRef,
    call: &crate::codegen::clif::reduce_call::ReduceCall,
    bases: Vec<Value>,
) -> Result<()> {
    let n_ops = bases.len();
    // Pointers, then the strides along O, then along I, then `sn`.
    let words = 3 * n_ops + call.sn.len();
    let slot = b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (8 * words) as u32,
        3,
    ));
    let ptr_ty = b.func.dfg.value_type(bases[0]);
    let at = |k: usize| 8 * k as i32;
    let consts: Vec<i64> = call
        .o
        .strides
        .iter()
        .chain(&call.i.strides)
        .chain(&call.sn)
        .copied()
        .collect();
    for (k, &c) in consts.iter().enumerate() {
        let v = b.ins().iconst(types::I64, c);
        b.ins().stack_store(ptr_ty, v, slot, at(n_ops + k));
    }
    let sizes: Vec<usize> = call.outer.iter().map(|d| d.size).collect();
    let strides: Vec<Vec<i64>> = (0..n_ops)
        .map(|j| call.outer.iter().map(|d| d.strides[j]).collect())
        .collect();
    let (o, n, i, mode) = (
        call.o.size as i64,
        call.n.size as i64,
        call.i.size as i64,
        call.mode,
    );
    let mut inner = |b: &mut FunctionBuilder, ptrs: &[Value]| -> Result<()> {
        for (j, &p) in ptrs.iter().enumerate() {
            b.ins().stack_store(ptr_ty, p, slot, at(j));
        }
        let addr = |b: &mut FunctionBuilder, k: usize| b.ins().stack_addr(ptr_ty, slot, at(k));
        let args = [
            b.ins().iconst(types::I64, o),
            b.ins().iconst(types::I64, n),
            b.ins().iconst(types::I64, i),
            addr(b, 0),
            addr(b, n_ops),
            addr(b, 3 * n_ops),
            addr(b, 2 * n_ops),
            b.ins().iconst(types::I64, mode),
        ];
        b.ins().call(f, &args);
        Ok(())
    };
    nest(b, &sizes, &strides, bases, &mut inner)
}
