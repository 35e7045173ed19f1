//! How a reduction's leaf reads its inputs at a position `n` along the reduced axes, shared by
//! the reductions (`reduce`) and argmax/argmin (`argreduce`).
//!
//! Two ways, chosen when the kernel is generated:
//! - **strided**: the reduced dims merged into one (`N`), input `j`'s element `n` at
//!   `bases[j] + n * sn[j]`;
//! - **cursor**: the reduced dims do not merge (axes `[0, 2]` of a contiguous `[A, B, C]`, a
//!   transposed view): `sn` then points to an N-d descriptor (below) and `n` is the flat,
//!   row-major index over the reduced dims, the order the reference reduces in. A leaf visits its
//!   elements in increasing `n`, one at a time, so the cursor keeps each input's address and
//!   steps along the innermost dim by its stride; only at the end of that dim (or to start) it
//!   calls `kiln_nd_seek` (generated into the module, `nd_seek.rs`), which computes the
//!   addresses of a flat position. The cursor has no limit on the number of dims.
//!
//! # N-d descriptor
//! `i64`s: `[k, m, inner[0..m], sizes[0..k], strides[0..k * m]]`: `k` reduced dims (outer to
//! inner) of `sizes`, input `j`'s byte stride along dim `d` at `strides[d * m + j]`, and
//! `inner[j] = strides[(k - 1) * m + j]` repeated for the generated code.

use super::map::{body, Bcast};
use super::operand_table::OperandTable;
use super::scalar_ops::{clif_type, lane_type, uses_math, Lanes, OpGen};
use crate::error::{Error, Result};
use crate::ir::scalar::ScalarProgram;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    types, Endianness, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_module::Module;

/// The shape of a leaf's loop.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Leaf {
    Scalar,
    /// Lanes along the reduced axis (strided `N` only).
    Row,
    /// One vector of outputs (along `I`).
    Col,
}

/// Whether a leaf hands input `a` (less input `sub`, one value all along the row) to a buffer
/// function as it is (`LeafInputs::direct`): a row leaf of vectors without a cursor, `a`
/// contiguous along the row, and `sub` one element along it that the leaf splats at its entry
/// (`splat`: the program reads it). `reduce_codegen::whole_row_sum` asks this before the leaf
/// exists.
pub(super) fn passes_directly(
    along_n: &[Bcast],
    leaf: Leaf,
    lanes: Option<Lanes>,
    cursor: bool,
    (a, sub): (usize, Option<usize>),
    splat: impl Fn(usize) -> bool,
) -> bool {
    leaf == Leaf::Row
        && lanes.is_some()
        && !cursor
        && along_n[a] == Bcast::Never
        && sub.is_none_or(|s| along_n[s] == Bcast::Always && splat(s))
}

/// A leaf's inputs, set up at its entry.
pub(super) struct LeafInputs<'s> {
    program: &'s ScalarProgram,
    along_n: &'s [Bcast],
    leaf: Leaf,
    lanes: Option<Lanes>,
    bases: Vec<Value>,
    /// Strides along `N` (strided walk).
    sn: Vec<Value>,
    /// Vector leaves: per input, all-ones lanes where it is broadcast along the vector axis,
    /// and the same as an i8 flag.
    masks: Vec<Value>,
    bcast: Vec<Value>,
    /// A stack buffer that broadcast inputs' vector loads read instead of their own memory.
    dummy: Value,
    cursor: Option<Cursor>,
    /// Row leaves: per input the type says is one element all along the row (a row max that
    /// a softmax subtracts), that element splat into a vector once, at the leaf's entry.
    row_splats: Vec<Option<Value>>,
    /// The leaf's operand constants (the leaf enters and leaves its loop bodies on it).
    pub table: OperandTable,
    /// Staged math (`host_math`): per math op, its buffer's address less the leaf's `start`
    /// elements, and its dtype: input `n_in + j` of a program reads position `n` of buffer `j`
    /// at `(shifted address) + n * size`, one addressing mode.
    buffers: Vec<(Value, crate::ir::DType)>,
}

struct Cursor {
    desc: Value,
    bases_p: Value,
    /// `[left, addrs[0..m]]`, written by the seek helper.
    state: Value,
    seek: FuncRef,
    inner: Vec<Value>,
    addrs: Vec<Variable>,
    /// Elements left in the current run along the innermost dim.
    left: Variable,
}

impl<'s> LeafInputs<'s> {
    /// Reads the leaf's parameters: `bases_p` (one address per input), `sn_p` (strides along
    /// `N`, or the N-d descriptor with `cursor`), `si_p` (strides along `I`), and for a cursor
    /// the first position `start`.
    #[allow(clippy::too_many_arguments)]
    pub fn new<M: Module>(
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &'s ScalarProgram,
        along_n: &'s [Bcast],
        leaf: Leaf,
        lanes: Option<Lanes>,
        cursor: bool,
        (bases_p, sn_p, si_p, start): (Value, Value, Value, Value),
    ) -> Result<Self> {
        if cursor && leaf == Leaf::Row {
            return Err(Error::Unsupported(
                "lanes along reduced dims that do not merge".into(),
            ));
        }
        let n_in = along_n.len();
        let ptr = module.target_config().pointer_type();
        let flags = MemFlagsData::trusted();
        let mut bases = Vec::new();
        let mut sn = Vec::new();
        let mut masks = Vec::new();
        let mut bcast = Vec::new();
        let dummy = {
            let slot =
                b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 64, 4));
            b.ins().stack_addr(ptr, slot, 0)
        };
        // The dtype the program reads each input as (`None`: it does not read it).
        let mut in_dtypes = program.input_dtypes();
        in_dtypes.resize(n_in, None);
        for j in 0..n_in {
            let off = (j * ptr.bytes() as usize) as i32;
            bases.push(b.ins().load(ptr, flags, bases_p, off));
            if !cursor {
                // A row leaf runs only where every input steps by its element size (or 0)
                // along the row, and the type says this one is not broadcast there: its stride
                // is known, and `n * size` folds into the load's address.
                let known = match (lanes, leaf, along_n[j], in_dtypes[j]) {
                    (Some(_), Leaf::Row, Bcast::Never, Some(d)) => Some(d.size() as i64),
                    _ => None,
                };
                sn.push(match known {
                    Some(size) => b.ins().iconst(types::I64, size),
                    None => b.ins().load(types::I64, flags, sn_p, (j * 8) as i32),
                });
            }
            if let Some(l) = lanes {
                // Broadcast along the vector axis: the stride there is 0.
                let step = if leaf == Leaf::Row {
                    sn[j]
                } else {
                    b.ins().load(types::I64, flags, si_p, (j * 8) as i32)
                };
                let bc = b.ins().icmp_imm_s(IntCC::Equal, step, 0);
                let mty = if l == Lanes::X32 {
                    types::I32X4
                } else {
                    types::I64X2
                };
                let wide = b.ins().uextend(mty.lane_type(), bc);
                let all = b.ins().ineg(wide);
                masks.push(b.ins().splat(mty, all));
                bcast.push(bc);
            }
        }
        // Loaded before the loop rather than on every vector: the stride along the row of
        // such an input is 0, so every position reads this element.
        let row_splats = (0..n_in)
            .map(|j| {
                let (Some(l), Leaf::Row, false, Bcast::Always) = (lanes, leaf, cursor, along_n[j])
                else {
                    return None;
                };
                let d = in_dtypes[j]?;
                let vty = lane_type(Some(l), d);
                let one = b.ins().load(vty.lane_type(), flags, bases[j], 0);
                Some(b.ins().splat(vty, one))
            })
            .collect();
        let cursor = if cursor {
            let id = super::nd_seek::declare_nd_seek(module)?;
            let seek = module.declare_func_in_func(id, b.func);
            let slot = b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                8 * (n_in as u32 + 1),
                3,
            ));
            let state = b.ins().stack_addr(ptr, slot, 0);
            let inner = (0..n_in)
                .map(|j| b.ins().load(types::I64, flags, sn_p, (16 + j * 8) as i32))
                .collect();
            let addrs = (0..n_in).map(|_| b.declare_var(ptr)).collect();
            let left = b.declare_var(types::I64);
            let c = Cursor {
                desc: sn_p,
                bases_p,
                state,
                seek,
                inner,
                addrs,
                left,
            };
            c.seek(b, start, n_in);
            Some(c)
        } else {
            None
        };
        let vector_leaf = lanes.is_some() && leaf != Leaf::Scalar;
        Ok(LeafInputs {
            program,
            along_n,
            leaf,
            lanes,
            bases,
            sn,
            masks,
            bcast,
            dummy,
            cursor,
            row_splats,
            table: OperandTable::new(module, vector_leaf && uses_math(program)),
            buffers: Vec::new(),
        })
    }

    /// From now on `value` computes `program`, whose inputs past the leaf's own read
    /// `buffers` (staged math, `host_math`; each an address less the leaf's `start` elements,
    /// so that position `n` is at `n * size` from it); its math (if any) takes no constants
    /// from the table.
    pub fn read_buffers<M: Module>(
        &mut self,
        module: &M,
        program: &'s ScalarProgram,
        buffers: Vec<(Value, crate::ir::DType)>,
    ) {
        self.program = program;
        self.buffers = buffers;
        self.table = OperandTable::new(module, false);
    }

    /// The prologue's value at position `n` along `N`: a scalar, or with `vector` a vector
    /// (lanes along `N` for `Row`, along `I` for `Col`). With a cursor, `n` must be the
    /// position after the previous call's (or `start` for the first), and the cursor moves on.
    pub fn value<M: Module>(
        &mut self,
        b: &mut FunctionBuilder,
        module: &mut M,
        n: Value,
        vector: bool,
    ) -> Result<Value> {
        let program = self.program;
        self.value_of(b, module, program, n, vector)
    }

    /// The number of the leaf's own inputs.
    pub fn n_in(&self) -> usize {
        self.along_n.len()
    }

    /// For a row leaf (lanes along `N`, strided): where input `a`'s elements start at position
    /// `start`, when the type says it is contiguous along the row, and input `sub`'s value when
    /// it is constant along the row (staged math hands them to a buffer function as
    /// `f(src[i] - shift)`); `None` otherwise.
    pub fn direct(
        &self,
        b: &mut FunctionBuilder,
        a: usize,
        sub: Option<usize>,
        start: Value,
    ) -> Option<(Value, Option<Value>)> {
        // The splats were made at the leaf's entry, from the whole program (the leaf reads
        // another program by now).
        let (leaf, cursor) = (self.leaf, self.cursor.is_some());
        let splat = |s: usize| self.row_splats[s].is_some();
        if !passes_directly(self.along_n, leaf, self.lanes, cursor, (a, sub), splat) {
            return None;
        }
        // The element type of `sub`, from its splat (which every row-constant input the
        // program reads has).
        let sub_ty = match sub {
            Some(s) => Some(b.func.dfg.value_type(self.row_splats[s]?).lane_type()),
            None => None,
        };
        let off = b.ins().imul(start, self.sn[a]);
        let src = b.ins().iadd(self.bases[a], off);
        let shift = sub
            .zip(sub_ty)
            .map(|(s, ty)| b.ins().load(ty, MemFlagsData::trusted(), self.bases[s], 0));
        Some((src, shift))
    }

    /// `value` of another program over the same inputs (a stage of staged math).
    pub fn value_of<M: Module>(
        &mut self,
        b: &mut FunctionBuilder,
        module: &mut M,
        program: &ScalarProgram,
        n: Value,
        vector: bool,
    ) -> Result<Value> {
        let flags = MemFlagsData::trusted();
        let vflags = MemFlagsData::new().with_notrap();
        let n_in = self.along_n.len();
        let addrs: Vec<Value> = match &self.cursor {
            None => (0..n_in)
                .map(|j| {
                    let off = b.ins().imul(n, self.sn[j]);
                    b.ins().iadd(self.bases[j], off)
                })
                .collect(),
            Some(c) => c.addrs.iter().map(|&v| b.use_var(v)).collect(),
        };
        let mut g = OpGen {
            b,
            module,
            lanes: if vector { self.lanes } else { None },
            table: Some(&mut self.table),
        };
        let (leaf, along_n, masks, bcast, dummy, row_splats, buffers) = (
            self.leaf,
            self.along_n,
            &self.masks,
            &self.bcast,
            self.dummy,
            &self.row_splats,
            &self.buffers,
        );
        let v = body(&mut g, program, |g, j, d| {
            if j >= n_in {
                // A staged math op's result, from its buffer (aligned, in the leaf's frame).
                let (shifted, bd) = buffers[j - n_in];
                let off = g.b.ins().imul_imm_s(n, bd.size() as i64);
                let at = g.b.ins().iadd(shifted, off);
                let ty = if vector { g.ty(d) } else { clif_type(d) };
                return g.b.ins().load(ty, flags, at, 0);
            }
            if !vector {
                return g.b.ins().load(clif_type(d), flags, addrs[j], 0);
            }
            if let Some(splat) = row_splats[j] {
                return splat;
            }
            let vty = g.ty(d);
            if leaf == Leaf::Row {
                match along_n[j] {
                    // The same element all along the row: one load, splat.
                    Bcast::Always => {
                        let one = g.b.ins().load(vty.lane_type(), flags, addrs[j], 0);
                        return g.b.ins().splat(vty, one);
                    }
                    // Contiguous along the row (the caller checked). `readonly` and `can_move`:
                    // a leaf writes no memory before its result, so Cranelift may place the
                    // load where its value is needed, rather than all of an iteration's loads
                    // first and their values spilled (callgrind, the exp-sum leaf of logsumexp
                    // rows: 38.4M -> 36.9M instructions).
                    Bcast::Never => {
                        let f = vflags.with_readonly().with_can_move();
                        return g.b.ins().load(vty, f, addrs[j], 0);
                    }
                    Bcast::Unknown => {}
                }
            }
            let one = g.b.ins().load(vty.lane_type(), flags, addrs[j], 0);
            let splat = g.b.ins().splat(vty, one);
            let at = g.b.ins().select(bcast[j], dummy, addrs[j]);
            let v = g.b.ins().load(vty, vflags, at, 0);
            let m = if vty.lane_type().is_float() {
                let f = MemFlagsData::new().with_endianness(Endianness::Little);
                g.b.ins().bitcast(vty, f, masks[j])
            } else {
                masks[j]
            };
            g.b.ins().bitselect(m, splat, v)
        })?;
        if let Some(c) = &self.cursor {
            c.step(b, n, n_in);
        }
        Ok(v[0])
    }
}

impl Cursor {
    /// Asks the helper for the addresses of position `n` and how much of the innermost run is
    /// left there.
    fn seek(&self, b: &mut FunctionBuilder, n: Value, n_in: usize) {
        let flags = MemFlagsData::trusted();
        b.ins()
            .call(self.seek, &[self.desc, self.bases_p, n, self.state]);
        let left = b.ins().load(types::I64, flags, self.state, 0);
        b.def_var(self.left, left);
        for j in 0..n_in {
            let ty = b.func.dfg.value_type(self.inner[j]);
            let a = b.ins().load(ty, flags, self.state, (8 + 8 * j) as i32);
            b.def_var(self.addrs[j], a);
        }
    }

    /// Moves from position `n` to `n + 1`: along the innermost dim, or through the helper at
    /// the end of the run. Leaves the builder in a fresh block.
    fn step(&self, b: &mut FunctionBuilder, n: Value, n_in: usize) {
        for j in 0..n_in {
            let a = b.use_var(self.addrs[j]);
            let a = b.ins().iadd(a, self.inner[j]);
            b.def_var(self.addrs[j], a);
        }
        let left = b.use_var(self.left);
        let left = b.ins().iadd_imm_s(left, -1);
        b.def_var(self.left, left);
        let carry = b.create_block();
        let cont = b.create_block();
        let end = b.ins().icmp_imm_s(IntCC::Equal, left, 0);
        b.ins().brif(end, carry, &[], cont, &[]);
        b.switch_to_block(carry);
        let next = b.ins().iadd_imm_s(n, 1);
        self.seek(b, next, n_in);
        b.ins().jump(cont, &[]);
        b.switch_to_block(cont);
    }
}
