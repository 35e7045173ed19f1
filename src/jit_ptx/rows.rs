//! Row-group kernels (`lower::rows`): a softmax-like group of map and reduce steps as one
//! kernel with one block per row (blocks stride over the rows; a row is an index over the
//! leading axes the reductions keep, its elements the trailing axes they reduce), so that each row is read from
//! memory once and its intermediates never go back to memory; the CPU's `rows` schedule, on
//! the GPU.
//!
//! Inside a row the members run in order. A reduction over the whole row is the reduce
//! kernel's (threads stride over the row's elements, vectors of `LANES` where the layout
//! allows, then a block tree: warp shuffles, one partial per warp in shared memory) and leaves
//! its value in every thread's registers. A map whose value is one per row (`log(s) + m`) is
//! computed by every thread from those. A map over the whole row is written where it is a
//! result and otherwise not at all: its readers compute its element again where they read it
//! (a softmax's `exp(x - m)` is evaluated in the sum's pass and again in the division's),
//! which costs arithmetic the GPU has to spare and saves a write and a read of the row. The
//! row stays in the cache between passes (one block reads a row of 32 KiB three times).
//!
//! Parameters (docs/gpu.md): `out_0 .. out_{m-1}` (the group's results), `in_0 .. in_{k-1}`
//! (the values it reads from outside), then `strides[k][r]` (`i64`), each input's element
//! strides over the group's frame (the rows' axes, then a row's; 0 along broadcast dims). The
//! frame is fixed when the kernel is built (row groups have known shapes). Results are
//! contiguous: a whole-row member's in the frame's shape, a per-row one's element `row`.

use super::gen::{bx, Gen};
use super::kernel::{
    counted_loop, declare_kernel, load, load_lanes, offsets, rows_in_groups, store, store_lanes,
    Inputs, LANES,
};
use super::launch::{strides_over, Launch, Operand};
use super::reduce::{as_word, combine, convert, finish, from_word, identity, if_then, warp_reduce};
use super::scalar::emit_program;
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use crate::ir::{DType, Func, ReduceOp, Reduction};
use crate::lower::rows::Role;
use crate::lower::{Kernel, Step};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::IntPredicate;

/// Where a member reads one of its arguments.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The group's argument `k` (a value from outside).
    Outside(usize),
    /// The value of an earlier member.
    Member(usize),
}

/// One member step as the kernel computes it.
struct Member<'p> {
    /// A reduction over the whole row, or `None` for a map.
    reduce: Option<ReduceOp>,
    /// The value computed per element (a reduction's fused producer, or the identity).
    program: &'p ScalarProgram,
    sources: Vec<Source>,
    /// One value per row (a map whose frame is `[rows, 1, ..]`) rather than one per element.
    per_row: bool,
    /// The result's dtype.
    dtype: DType,
}

impl Member<'_> {
    /// Whether its elements are computed again where they are read (a whole-row map) rather
    /// than held per row.
    fn recomputed(&self) -> bool {
        self.reduce.is_none() && !self.per_row
    }
}

/// What the kernel of one row group computes.
pub struct RowsSpec<'p> {
    /// The frame's leading axes that index the rows (one row per index over them); the
    /// others are a row's.
    pub kept: usize,
    members: Vec<Member<'p>>,
    arg_dtypes: Vec<DType>,
    /// The index space: the rows' axes (`kept` of them), then a row's.
    pub frame: Vec<usize>,
    /// Per result of the group, the member that computes it.
    results: Vec<usize>,
    /// Each result's shape.
    pub result_shapes: Vec<Vec<usize>>,
}

impl<'p> RowsSpec<'p> {
    /// The spec of the row group `step`, or `None` when this kernel does not take it
    /// (reductions over different or non-trailing axes, an arg-reduction, frames of several
    /// shapes, an empty row): its members then run as kernels of their own.
    pub fn of(func: &Func, step: &'p Step) -> Option<RowsSpec<'p>> {
        let Kernel::Rows { rows, steps, roles } = &step.kernel else {
            return None;
        };
        let known = |space: &[crate::ir::Dim]| space.iter().copied().collect::<Option<Vec<_>>>();
        let spaces: Vec<Vec<usize>> = steps
            .iter()
            .map(|m| match &m.kernel {
                Kernel::Map { space, .. } | Kernel::Reduce { space, .. } => known(space),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let frame = spaces
            .iter()
            .max_by_key(|s| s.iter().product::<usize>())?
            .clone();
        // The kernel's rows: the frame's axes the reductions keep (a leading run, axis 0 at
        // least); its rows' elements: the trailing axes they reduce, every reduction the same.
        let reduced: Vec<&Option<Vec<usize>>> = steps
            .iter()
            .filter_map(|m| match &m.kernel {
                Kernel::Reduce { axes, .. } => Some(axes),
                _ => None,
            })
            .collect();
        let axes = reduced.first()?.as_deref()?;
        let kept = *axes.first()?;
        let trailing = axes.iter().copied().eq(kept..frame.len());
        if !trailing || reduced.iter().any(|a| a.as_deref() != Some(axes)) {
            return None;
        }
        let n_row: usize = frame[kept..].iter().product();
        if kept == 0 || frame[0] != *rows || n_row == 0 {
            return None;
        }
        let per_row_frame: Vec<usize> = frame[..kept]
            .iter()
            .copied()
            .chain(std::iter::repeat_n(1, frame.len() - kept))
            .collect();
        let mut members: Vec<Member> = Vec::with_capacity(steps.len());
        for ((m, space), roles) in steps.iter().zip(&spaces).zip(roles) {
            let per_row = *space != frame;
            // One value per row: `[rows, 1, ..]`, or `[rows]` over held values only (the
            // launch gives outside values strides over the whole frame).
            let held_only = roles.iter().all(|r| matches!(r, Role::Inner(_)));
            let one_per_row =
                *space == per_row_frame || (held_only && space.as_slice() == &frame[..kept]);
            if per_row && !one_per_row {
                return None;
            }
            let (reduce, program) = match &m.kernel {
                Kernel::Map { program, .. } => (None, &**program),
                Kernel::Reduce { op, program, .. } => {
                    let vd = program.insts[program.outputs[0]].dtype;
                    let ad = crate::ir::Reduction::of(*op, vd).result;
                    // (A float product keeps the interpreter's order: a kernel of its own.)
                    if per_row
                        || matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin)
                        || super::reduce::in_interpreters_order(*op, ad)
                    {
                        return None;
                    }
                    (Some(*op), &**program)
                }
                _ => return None,
            };
            let sources: Vec<Source> = m
                .args
                .iter()
                .zip(roles)
                .map(|(a, role)| match role {
                    Role::Inner(j) => Source::Member(*j),
                    Role::Rows | Role::Whole => {
                        Source::Outside(step.args.iter().position(|x| x == a).unwrap_or(0))
                    }
                })
                .collect();
            // A per-row value reads only per-row values (a map over the whole row would make
            // its result whole-row too).
            if per_row
                && sources
                    .iter()
                    .any(|s| matches!(s, Source::Member(j) if members[*j].recomputed()))
            {
                return None;
            }
            if program.outputs.len() != 1 {
                return None;
            }
            let dtype = func.ty(m.results[0]).dtype;
            if let Some(op) = reduce {
                // The accumulator is the result (the reduce kernel's rule).
                let vd = program.insts[program.outputs[0]].dtype;
                if Reduction::of(op, vd).result != dtype {
                    return None;
                }
            }
            members.push(Member {
                reduce,
                program,
                sources,
                per_row,
                dtype,
            });
        }
        let results = step
            .results
            .iter()
            .map(|r| steps.iter().position(|m| m.results[0] == *r))
            .collect::<Option<Vec<_>>>()?;
        let result_shapes = step
            .results
            .iter()
            .map(|&r| func.ty(r).known_shape())
            .collect::<Option<Vec<_>>>()?;
        Some(RowsSpec {
            kept,
            members,
            arg_dtypes: step.args.iter().map(|&a| func.ty(a).dtype).collect(),
            frame,
            results,
            result_shapes,
        })
    }

    /// The dtype of each result.
    pub fn out_dtypes(&self) -> Vec<DType> {
        self.results
            .iter()
            .map(|&k| self.members[k].dtype)
            .collect()
    }

    /// Per argument of the group, whether a whole-row member reads it (through the maps it
    /// computes again).
    fn read_by_rows(&self) -> Vec<bool> {
        let mut read = vec![false; self.arg_dtypes.len()];
        for k in (0..self.members.len()).filter(|&k| !self.members[k].per_row) {
            for (a, r) in self.outside_reads(k).into_iter().enumerate() {
                read[a] |= r;
            }
        }
        read
    }

    /// The group's arguments member `k`'s value for one element reads: its own, and those of
    /// the whole-row maps it computes again.
    fn outside_reads(&self, k: usize) -> Vec<bool> {
        let mut read = vec![false; self.arg_dtypes.len()];
        let mut stack = vec![k];
        while let Some(k) = stack.pop() {
            let m = &self.members[k];
            let reads = m.program.input_dtypes();
            for (i, s) in m.sources.iter().enumerate() {
                if reads.get(i).copied().flatten().is_none() {
                    continue;
                }
                match *s {
                    Source::Outside(a) => read[a] = true,
                    Source::Member(j) if self.members[j].recomputed() => stack.push(j),
                    Source::Member(_) => {}
                }
            }
        }
        read
    }
}

/// The launch of a row-group kernel of `frame` on `inputs`: each input's strides over the
/// frame, which it must broadcast to.
pub fn rows_launch<T: Operand>(frame: &[usize], inputs: &[T]) -> Result<Launch> {
    let mut scalars = Vec::with_capacity(inputs.len() * frame.len());
    for t in inputs {
        let fits = crate::ir::broadcast_shapes(t.shape(), frame).is_ok_and(|s| s == frame);
        if !fits {
            return Err(Error::Shape(format!(
                "row group: an argument of shape {:?} does not broadcast to the rows {frame:?}",
                t.shape()
            )));
        }
        scalars.extend(strides_over(t, frame));
    }
    Ok(Launch {
        out_shape: frame.to_vec(),
        scalars,
        work: true,
    })
}

/// Defines the kernel `name` of the row group `spec`.
pub fn define_rows<'ctx>(g: &Gen<'ctx>, name: &str, spec: &RowsSpec) -> Result<()> {
    let (n_res, n_in, r) = (spec.results.len(), spec.arg_dtypes.len(), spec.frame.len());
    let readonly: Vec<bool> = (0..n_res)
        .map(|_| false)
        .chain((0..n_in).map(|_| true))
        .collect();
    let noalias = vec![true; n_res + n_in];
    let k = declare_kernel(g, name, &readonly, &noalias, n_in * r)?;
    let strides: Vec<Vec<IntValue>> = (0..n_in)
        .map(|j| k.scalars[j * r..(j + 1) * r].to_vec())
        .collect();
    // The reductions' running partials: slots in the entry block, registers after mem2reg.
    let mut slots = Vec::with_capacity(spec.members.len());
    for m in &spec.members {
        slots.push(match m.reduce {
            Some(_) => Some(bx(g.b.build_alloca(g.reg_type(m.dtype), "acc"))?),
            None => None,
        });
    }
    let frame: Vec<IntValue> = spec.frame.iter().map(|&d| g.c64(d as i64)).collect();
    let read = spec.read_by_rows();
    let inputs = Inputs {
        ptrs: &k.pointers[n_res..],
        dtypes: &spec.arg_dtypes,
    };
    // Groups of `LANES` along the row's innermost dim where every input read over the row is
    // whole and aligned along it, or broadcast (`rows_in_groups`, as for maps).
    let by_groups = match spec.frame[r - 1] % LANES as usize {
        0 => rows_in_groups(g, &frame, &strides, &read, &inputs)?,
        _ => None,
    };
    let kernel = RowKernel {
        g,
        func: k.func,
        spec,
        outs: &k.pointers[..n_res],
        ins: &k.pointers[n_res..],
        strides: &strides,
        frame: &frame,
        by_groups,
        tree: BlockTree::new(g, name)?,
    };
    let ctaid = g.sreg("ctaid.x")?;
    let nctaid = g.sreg("nctaid.x")?;
    let n_rows: usize = spec.frame[..spec.kept].iter().product();
    counted_loop(
        g,
        k.func,
        ctaid,
        nctaid,
        g.c64(n_rows as i64),
        "rows",
        |row| kernel.row(row, &slots),
    )?;
    bx(g.b.build_return(None))?;
    Ok(())
}

/// What the code of one row reads.
struct RowKernel<'a, 'ctx> {
    g: &'a Gen<'ctx>,
    func: FunctionValue<'ctx>,
    spec: &'a RowsSpec<'a>,
    outs: &'a [PointerValue<'ctx>],
    ins: &'a [PointerValue<'ctx>],
    strides: &'a [Vec<IntValue<'ctx>>],
    frame: &'a [IntValue<'ctx>],
    /// Whether, at run time, the row's elements go in vector groups.
    by_groups: Option<IntValue<'ctx>>,
    tree: BlockTree<'ctx>,
}

/// The values one element (one lane of a group) has computed so far.
type Memo<'ctx> = Vec<Option<BasicValueEnum<'ctx>>>;

impl<'ctx> RowKernel<'_, 'ctx> {
    /// The members, in order, on row `row`.
    fn row(&self, row: IntValue<'ctx>, slots: &[Option<PointerValue<'ctx>>]) -> Result<()> {
        let g = self.g;
        // Where the row starts in each input: its index over the kept axes.
        let kept = self.spec.kept;
        let row_strides: Vec<Vec<IntValue>> =
            self.strides.iter().map(|s| s[..kept].to_vec()).collect();
        let base = offsets(g, row, &self.frame[..kept], &row_strides)?;
        // The values held per row (reductions, per-row maps), as they are computed.
        let mut held: Memo<'ctx> = vec![None; self.spec.members.len()];
        let tid = g.sreg("tid.x")?;
        let is_t0 = bx(g.b.build_int_compare(IntPredicate::EQ, tid, g.c64(0), "t0"))?;
        for (k, m) in self.spec.members.iter().enumerate() {
            let result = self.spec.results.iter().position(|&i| i == k);
            if m.per_row {
                let vals = self.args_of(k, &held, &mut |a| {
                    load(g, self.ins[a], self.spec.arg_dtypes[a], base[a])
                })?;
                let v = emit_program(g, m.program, &vals)?[0];
                held[k] = Some(v);
                if let Some(o) = result {
                    if_then(g, self.func, is_t0, "write_row", || {
                        store(g, self.outs[o], m.dtype, row, v)
                    })?;
                }
            } else if let Some(op) = m.reduce {
                let slot = slots[k].ok_or_else(|| Error::Runtime("a reduction's slot".into()))?;
                let p = m.program;
                let vd = p.insts[p.outputs[0]].dtype;
                bx(g.b.build_store(slot, identity(g, op, m.dtype)))?;
                self.elements(k, &base, &held, |_, xs| {
                    for x in xs {
                        let x = convert(g, op, vd, m.dtype, x)?;
                        let a = bx(g.b.build_load(g.reg_type(m.dtype), slot, "a"))?;
                        bx(g.b.build_store(slot, combine(g, op, m.dtype, a, x)?))?;
                    }
                    Ok(())
                })?;
                let acc = bx(g.b.build_load(g.reg_type(m.dtype), slot, "partial"))?;
                let v = self.tree.combine(g, self.func, op, m.dtype, acc, slot)?;
                let v = finish(g, op, m.dtype, v, self.row_len()?)?;
                held[k] = Some(v);
                if let Some(o) = result {
                    if_then(g, self.func, is_t0, "write_row", || {
                        store(g, self.outs[o], m.dtype, row, v)
                    })?;
                }
            } else if let Some(o) = result {
                // A whole-row map that is a result; one that is not is computed where read.
                let n_row = self.row_len()?;
                let row_at = bx(g.b.build_int_mul(row, n_row, "out_row"))?;
                self.elements(k, &base, &held, |e, xs| {
                    let at = bx(g.b.build_int_add(row_at, e, "at"))?;
                    match xs.len() {
                        1 => store(g, self.outs[o], m.dtype, at, xs[0]),
                        _ => store_lanes(g, self.outs[o], m.dtype, at, &xs),
                    }
                })?;
            }
        }
        Ok(())
    }

    /// Elements in a row (the frame's product after its first dim).
    fn row_len(&self) -> Result<IntValue<'ctx>> {
        let n: usize = self.spec.frame[self.spec.kept..].iter().product();
        Ok(self.g.c64(n as i64))
    }

    /// Member `k`'s arguments in register form, for one element whose group arguments
    /// `outside(a)` loads: held values as they are, whole-row maps computed again.
    fn args_of(
        &self,
        k: usize,
        held: &Memo<'ctx>,
        outside: &mut dyn FnMut(usize) -> Result<BasicValueEnum<'ctx>>,
    ) -> Result<Vec<Option<BasicValueEnum<'ctx>>>> {
        let mut memo: Memo<'ctx> = held.clone();
        let mut loaded: Memo<'ctx> = vec![None; self.spec.arg_dtypes.len()];
        let mut fetch = |a: usize| -> Result<BasicValueEnum<'ctx>> {
            if let Some(v) = loaded[a] {
                return Ok(v);
            }
            let v = outside(a)?;
            loaded[a] = Some(v);
            Ok(v)
        };
        self.sources_of(k, &mut memo, &mut fetch)
    }

    /// Member `k`'s arguments for one element (see `args_of`), with `memo` holding the
    /// members' values for the element so far.
    fn sources_of(
        &self,
        k: usize,
        memo: &mut Memo<'ctx>,
        fetch: &mut dyn FnMut(usize) -> Result<BasicValueEnum<'ctx>>,
    ) -> Result<Vec<Option<BasicValueEnum<'ctx>>>> {
        let m = &self.spec.members[k];
        let reads = m.program.input_dtypes();
        let mut vals = Vec::with_capacity(m.sources.len());
        for (i, s) in m.sources.iter().enumerate() {
            if reads.get(i).copied().flatten().is_none() {
                vals.push(None);
                continue;
            }
            vals.push(Some(match *s {
                Source::Outside(a) => fetch(a)?,
                Source::Member(j) => match memo[j] {
                    Some(v) => v,
                    None => {
                        let args = self.sources_of(j, memo, fetch)?;
                        let v = emit_program(self.g, self.spec.members[j].program, &args)?[0];
                        memo[j] = Some(v);
                        v
                    }
                },
            }));
        }
        Ok(vals)
    }

    /// Runs `body(e, values)` over the row's elements, this thread's share (elements `tid`,
    /// `tid + ntid`, ...): `values` is member `k`'s value at elements `e ..`, `LANES` of them
    /// in the vector path, one otherwise.
    fn elements(
        &self,
        k: usize,
        base: &[IntValue<'ctx>],
        held: &Memo<'ctx>,
        mut body: impl FnMut(IntValue<'ctx>, Vec<BasicValueEnum<'ctx>>) -> Result<()>,
    ) -> Result<()> {
        let g = self.g;
        let func = self.func;
        let tid = g.sreg("tid.x")?;
        let ntid = g.sreg("ntid.x")?;
        let n_row = self.row_len()?;
        let kept = self.spec.kept;
        let inner = &self.frame[kept..];
        let inner_strides: Vec<Vec<IntValue>> =
            self.strides.iter().map(|s| s[kept..].to_vec()).collect();
        let program = self.spec.members[k].program;
        let at = |e: IntValue<'ctx>| -> Result<Vec<IntValue<'ctx>>> {
            let offs = offsets(g, e, inner, &inner_strides)?;
            offs.iter()
                .zip(base)
                .map(|(&o, &b)| bx(g.b.build_int_add(b, o, "at")))
                .collect()
        };
        let join = g.ctx.append_basic_block(func, "row_done");
        if let Some(fast) = self.by_groups {
            let groups_bb = g.ctx.append_basic_block(func, "row_groups");
            let elems_bb = g.ctx.append_basic_block(func, "row_elems");
            bx(g.b.build_conditional_branch(fast, groups_bb, elems_bb))?;
            g.b.position_at_end(groups_bb);
            let n_groups = bx(g.b.build_int_unsigned_div(n_row, g.c64(LANES as i64), ""))?;
            let reads = self.spec.outside_reads(k);
            counted_loop(g, func, tid, ntid, n_groups, "groups", |q| {
                let e = bx(g.b.build_int_mul(q, g.c64(LANES as i64), "e"))?;
                let offs = at(e)?;
                let mut lanes: Vec<Memo<'ctx>> =
                    vec![vec![None; self.spec.arg_dtypes.len()]; LANES as usize];
                for (a, _) in reads.iter().enumerate().filter(|(_, &r)| r) {
                    let last = self.strides[a][self.frame.len() - 1];
                    let whole = bx(g.b.build_int_compare(IntPredicate::EQ, last, g.c64(1), ""))?;
                    let d = self.spec.arg_dtypes[a];
                    let xs = load_lanes(g, func, self.ins[a], d, offs[a], Some(whole))?;
                    for (lane, x) in lanes.iter_mut().zip(xs) {
                        lane[a] = Some(x);
                    }
                }
                let mut xs = Vec::with_capacity(LANES as usize);
                for lane in &lanes {
                    let vals = self.args_of(k, held, &mut |a| {
                        lane[a].ok_or_else(|| Error::Runtime("row group: an unloaded input".into()))
                    })?;
                    xs.push(emit_program(g, program, &vals)?[0]);
                }
                body(e, xs)
            })?;
            bx(g.b.build_unconditional_branch(join))?;
            g.b.position_at_end(elems_bb);
        }
        counted_loop(g, func, tid, ntid, n_row, "elems", |e| {
            let offs = at(e)?;
            let vals = self.args_of(k, held, &mut |a| {
                load(g, self.ins[a], self.spec.arg_dtypes[a], offs[a])
            })?;
            let x = emit_program(g, program, &vals)?[0];
            body(e, vec![x])
        })?;
        bx(g.b.build_unconditional_branch(join))?;
        g.b.position_at_end(join);
        Ok(())
    }
}

/// A block's threads combining their partials into one value every thread holds: warp
/// shuffles, then one partial per warp in shared memory (a 64-bit word each), which every
/// thread combines in warp order. Two barriers: the partials are all written before they are
/// read, and all read before the next reduction writes them.
struct BlockTree<'ctx> {
    /// `[32 x i64]` in shared memory (`None` on the host: one thread, nothing to combine).
    partials: Option<PointerValue<'ctx>>,
}

impl<'ctx> BlockTree<'ctx> {
    fn new(g: &Gen<'ctx>, name: &str) -> Result<BlockTree<'ctx>> {
        if g.host {
            return Ok(BlockTree { partials: None });
        }
        Ok(BlockTree {
            partials: Some(g.warp_partials(g.i64(), &format!("{name}_partials"))),
        })
    }

    /// The block's combined value of the threads' partials `acc` (dtype `ad`), using `slot`
    /// (an accumulator slot of `ad`) for the last step.
    fn combine(
        &self,
        g: &Gen<'ctx>,
        func: FunctionValue<'ctx>,
        op: ReduceOp,
        ad: DType,
        acc: BasicValueEnum<'ctx>,
        slot: PointerValue<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let Some(smem) = self.partials else {
            return Ok(acc);
        };
        let ty = g.i64().array_type(32);
        let at = |idx: IntValue<'ctx>| {
            bx(unsafe {
                g.b.build_in_bounds_gep(ty, smem, &[g.c64(0), idx], "partial")
            })
        };
        let tid = g.sreg("tid.x")?;
        let ntid = g.sreg("ntid.x")?;
        let lane = bx(g.b.build_and(tid, g.c64(31), "lane"))?;
        let warp = bx(g.b.build_right_shift(tid, g.c64(5), false, "warp"))?;
        let nwarps = bx(g.b.build_int_add(ntid, g.c64(31), ""))?;
        let nwarps = bx(g.b.build_right_shift(nwarps, g.c64(5), false, "nwarps"))?;
        let v = warp_reduce(g, op, ad, acc)?;
        let is_lane0 = bx(g.b.build_int_compare(IntPredicate::EQ, lane, g.c64(0), ""))?;
        if_then(g, func, is_lane0, "publish", || {
            let w = as_word(g, ad, v)?;
            let w = bx(g.b.build_int_z_extend_or_bit_cast(w, g.i64(), ""))?;
            bx(g.b.build_store(at(warp)?, w))?;
            Ok(())
        })?;
        g.barrier()?;
        bx(g.b.build_store(slot, identity(g, op, ad)))?;
        let word = match ad.size() {
            8 => g.i64(),
            _ => g.i32(),
        };
        counted_loop(g, func, g.c64(0), g.c64(1), nwarps, "warps", |w| {
            let x = bx(g.b.build_load(g.i64(), at(w)?, "w"))?.into_int_value();
            let x = bx(g.b.build_int_truncate_or_bit_cast(x, word, ""))?;
            let a = bx(g.b.build_load(g.reg_type(ad), slot, "a"))?;
            bx(g.b.build_store(slot, combine(g, op, ad, a, from_word(g, ad, x)?)?))?;
            Ok(())
        })?;
        g.barrier()?;
        bx(g.b.build_load(g.reg_type(ad), slot, "row_value"))
    }
}
