//! Cranelift leaves for argmax and argmin, called by the reduction entry of `reduce`
//! (same nest, same leaf signature; the leaf stores the `i64` index at the output itself).
//!
//! # What the index is
//! The reference (`perform::reduce::arg_extreme`) scans a row and keeps the first element
//! strictly greater (argmin: less) than the best so far, and returns at the first NaN. So the
//! answer is: the position of the first NaN if there is one, else the first position whose
//! value compares equal to the extreme (`-0.0 == 0.0`: whichever comes first). That rule does
//! not depend on the order the elements are visited in, which lets the leaves split the work:
//! - the scalar leaf scans in order with "take `x` if it is better, or NaN over a non-NaN";
//! - the row leaf (lanes along `N`, strided only) keeps eight running (value, position) pairs
//!   in vectors, each lane seeing its elements in order with the same rule, then merges the
//!   eight with the full rule (a NaN beats a number, a greater value beats a smaller, and
//!   between equal values or two NaNs the smaller position wins) and scans the `len % 8` last
//!   elements in order;
//! - the column leaf runs one output per lane (vectors of outputs along `I`), each lane in
//!   order.
//!
//! Vector leaves keep positions in lanes as wide as the values' (`i32` next to `f32`), so the
//! caller uses them only for `N < 2^31` (`reduce.rs`); integers compare signed, bools (scalar
//! only) as `false < true`.

use super::reduce::{finish, leaf_signature, vec_type, Spec};
use super::reduce_operands::{Leaf, LeafInputs};
use super::scalar_ops::Lanes;
use crate::error::{Error, Result};
use crate::ir::{DType, ReduceOp};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};

/// How two candidates compare, lane by lane on vectors.
struct Cmp {
    max: bool,
    vd: DType,
}

impl Cmp {
    /// Whether `x` beats the best-so-far `a` when every position of `x` comes after `a`'s:
    /// strictly better, or a NaN where `a` is not one. A mask (i8, or lanes of all ones).
    fn in_order(&self, b: &mut FunctionBuilder, x: Value, a: Value) -> Value {
        match self.vd {
            DType::F32 | DType::F64 => {
                let cc = if self.max {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let better = b.ins().fcmp(cc, x, a);
                let x_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
                let a_nan = b.ins().fcmp(FloatCC::Unordered, a, a);
                let nan = b.ins().band_not(x_nan, a_nan);
                b.ins().bor(better, nan)
            }
            // Bools are 0 and 1.
            DType::Bool => {
                let cc = if self.max {
                    IntCC::UnsignedGreaterThan
                } else {
                    IntCC::UnsignedLessThan
                };
                b.ins().icmp(cc, x, a)
            }
            _ => {
                let cc = if self.max {
                    IntCC::SignedGreaterThan
                } else {
                    IntCC::SignedLessThan
                };
                b.ins().icmp(cc, x, a)
            }
        }
    }

    /// Whether (`x`, `i`) beats (`a`, `k`) in any order (scalars): as `in_order`, or equal
    /// values (two NaNs included) and `i < k`.
    fn any_order(&self, b: &mut FunctionBuilder, x: Value, i: Value, a: Value, k: Value) -> Value {
        let before = b.ins().icmp(IntCC::SignedLessThan, i, k);
        let ahead = self.in_order(b, x, a);
        let same = if self.vd.is_float() {
            let eq = b.ins().fcmp(FloatCC::Equal, x, a);
            let x_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
            let a_nan = b.ins().fcmp(FloatCC::Unordered, a, a);
            let both = b.ins().band(x_nan, a_nan);
            b.ins().bor(eq, both)
        } else {
            b.ins().icmp(IntCC::Equal, x, a)
        };
        let tie = b.ins().band(same, before);
        b.ins().bor(ahead, tie)
    }
}

/// `x` where the lane mask `m` is set, else `y` (vectors of any lane type of `m`'s width).
fn vselect(b: &mut FunctionBuilder, m: Value, x: Value, y: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    let m = if ty.lane_type().is_float() {
        let f = MemFlagsData::new().with_endianness(Endianness::Little);
        b.ins().bitcast(ty, f, m)
    } else {
        m
    };
    b.ins().bitselect(m, x, y)
}

/// The type of positions in vectors next to values of `lanes`.
fn index_type(lanes: Lanes) -> Type {
    match lanes {
        Lanes::X32 => types::I32X4,
        Lanes::X64 => types::I64X2,
    }
}

/// A position (i64) as a vector lane, splat.
fn splat_index(b: &mut FunctionBuilder, lanes: Lanes, n: Value) -> Value {
    let lane = match lanes {
        Lanes::X32 => b.ins().ireduce(types::I32, n),
        Lanes::X64 => n,
    };
    b.ins().splat(index_type(lanes), lane)
}

/// A leaf for argmax/argmin (signature and arguments as `reduce`'s leaves; `out`
/// receives the index as `i64`, or for `Col` one `i64` per lane).
pub(super) fn define_arg_leaf<M: Module>(
    module: &mut M,
    name: &str,
    s: &Spec,
    leaf: Leaf,
    lanes: Option<Lanes>,
    cursor: bool,
) -> Result<(FuncId, String)> {
    if leaf != Leaf::Scalar && (lanes.is_none() || s.vd == DType::Bool) {
        return Err(Error::Unsupported(format!(
            "{name}: vector argmax of bools"
        )));
    }
    let sig = leaf_signature(module);
    let id = module
        .declare_function(name, Linkage::Local, &sig)
        .map_err(|e| Error::Unsupported(format!("{name}: {e}")))?;
    let mut ctx = module.make_context();
    ctx.func.signature = sig;
    let mut fctx = FunctionBuilderContext::new();
    let flags = MemFlagsData::trusted();
    let cmp = Cmp {
        max: s.op == ReduceOp::ArgMax,
        vd: s.vd,
    };
    {
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let (bases_p, sn_p, si_p, start, len, out) = (p[0], p[1], p[2], p[3], p[4], p[5]);
        let mut inputs = LeafInputs::new(
            &mut b,
            module,
            s.program,
            s.along_n,
            leaf,
            lanes,
            cursor,
            (bases_p, sn_p, si_p, start),
        )?;
        let end = b.ins().iadd(start, len);
        let vty = lanes.map(|l| vec_type(l, s.vd));
        let sty = super::scalar_ops::clif_type(s.vd);
        match (leaf, lanes) {
            (Leaf::Col, Some(l)) => {
                // One output per lane, each scanned in order.
                let ity = index_type(l);
                let head = b.create_block();
                let body = b.create_block();
                let done = b.create_block();
                let vty = vty.expect("lanes");
                b.append_block_param(head, types::I64);
                b.append_block_param(head, vty);
                b.append_block_param(head, ity);
                b.append_block_param(done, ity);
                let x0 = inputs.value(&mut b, module, start, true)?;
                let i0 = splat_index(&mut b, l, start);
                let n1 = b.ins().iadd_imm_s(start, 1);
                b.ins().jump(head, &[n1.into(), x0.into(), i0.into()]);
                b.switch_to_block(head);
                let hp = b.block_params(head).to_vec();
                let (n, best, bi) = (hp[0], hp[1], hp[2]);
                let more = b.ins().icmp(IntCC::SignedLessThan, n, end);
                b.ins().brif(more, body, &[], done, &[bi.into()]);
                b.switch_to_block(body);
                let x = inputs.value(&mut b, module, n, true)?;
                let take = cmp.in_order(&mut b, x, best);
                let best2 = vselect(&mut b, take, x, best);
                let iv = splat_index(&mut b, l, n);
                let bi2 = vselect(&mut b, take, iv, bi);
                let next = b.ins().iadd_imm_s(n, 1);
                b.ins().jump(head, &[next.into(), best2.into(), bi2.into()]);
                b.switch_to_block(done);
                let bi = b.block_params(done)[0];
                let vf = MemFlagsData::new().with_notrap();
                match l {
                    Lanes::X64 => {
                        b.ins().store(vf, bi, out, 0);
                    }
                    Lanes::X32 => {
                        let lo = b.ins().swiden_low(bi);
                        let hi = b.ins().swiden_high(bi);
                        b.ins().store(vf, lo, out, 0);
                        b.ins().store(vf, hi, out, 16);
                    }
                }
                b.ins().return_(&[]);
            }
            _ => {
                // The in-order scan of `from..end` from the best (value, position) so far.
                let head = b.create_block();
                let body = b.create_block();
                let done = b.create_block();
                b.append_block_param(head, types::I64);
                b.append_block_param(head, sty);
                b.append_block_param(head, types::I64);
                b.append_block_param(done, types::I64);
                match (leaf, lanes) {
                    (Leaf::Row, Some(l)) => {
                        let vty = vty.expect("lanes");
                        row_vectors(
                            &mut b,
                            module,
                            &mut inputs,
                            &cmp,
                            l,
                            vty,
                            (start, len),
                            head,
                        )?;
                    }
                    _ => {
                        let x0 = inputs.value(&mut b, module, start, false)?;
                        let n1 = b.ins().iadd_imm_s(start, 1);
                        b.ins().jump(head, &[n1.into(), x0.into(), start.into()]);
                    }
                }
                b.switch_to_block(head);
                let hp = b.block_params(head).to_vec();
                let (n, best, bi) = (hp[0], hp[1], hp[2]);
                let more = b.ins().icmp(IntCC::SignedLessThan, n, end);
                b.ins().brif(more, body, &[], done, &[bi.into()]);
                b.switch_to_block(body);
                let x = inputs.value(&mut b, module, n, false)?;
                let take = cmp.in_order(&mut b, x, best);
                let best2 = b.ins().select(take, x, best);
                let bi2 = b.ins().select(take, n, bi);
                let next = b.ins().iadd_imm_s(n, 1);
                b.ins().jump(head, &[next.into(), best2.into(), bi2.into()]);
                b.switch_to_block(done);
                let bi = b.block_params(done)[0];
                b.ins().store(flags, bi, out, 0);
                b.ins().return_(&[]);
            }
        }
        b.seal_all_blocks();
        b.finalize(module.target_config());
    }
    finish(module, id, name, &mut ctx)
}

/// The row leaf's vector part: with at least eight elements, eight running (value, position)
/// pairs in `8 / lanes` vectors over `start..start + len & !7`, merged into one, then a jump
/// to the in-order scan `tail` from there; with fewer, the scan from the first element.
#[allow(clippy::too_many_arguments)]
fn row_vectors<M: Module>(
    b: &mut FunctionBuilder,
    module: &mut M,
    inputs: &mut LeafInputs,
    cmp: &Cmp,
    l: Lanes,
    vty: Type,
    (start, len): (Value, Value),
    tail: cranelift_codegen::ir::Block,
) -> Result<()> {
    let lc = l.count();
    let n_acc = (8 / lc) as usize;
    let ity = index_type(l);
    let short = b.create_block();
    let init = b.create_block();
    let few = b.ins().icmp_imm_s(IntCC::SignedLessThan, len, 8);
    b.ins().brif(few, short, &[], init, &[]);

    b.switch_to_block(short);
    let x0 = inputs.value(b, module, start, false)?;
    let n1 = b.ins().iadd_imm_s(start, 1);
    b.ins().jump(tail, &[n1.into(), x0.into(), start.into()]);

    // The first eight elements start the pairs; lane k of vector a holds position
    // start + a * lanes + k.
    b.switch_to_block(init);
    let mut iota = b.ins().iconst(ity.lane_type(), 0);
    iota = b.ins().splat(ity, iota);
    for k in 1..lc {
        let c = b.ins().iconst(ity.lane_type(), k);
        iota = b.ins().insertlane(iota, c, k as u8);
    }
    let mut vals = Vec::new();
    let mut idxs = Vec::new();
    for a in 0..n_acc {
        let na = b.ins().iadd_imm_s(start, a as i64 * lc);
        vals.push(inputs.value(b, module, na, true)?);
        let s = splat_index(b, l, na);
        idxs.push(b.ins().iadd(s, iota));
    }
    let chunks = b.ins().band_imm_s(len, -8);
    let end8 = b.ins().iadd(start, chunks);
    let head = b.create_block();
    let body = b.create_block();
    let merge = b.create_block();
    b.append_block_param(head, types::I64);
    for _ in 0..n_acc {
        b.append_block_param(head, vty);
        b.append_block_param(head, ity);
        b.append_block_param(merge, vty);
        b.append_block_param(merge, ity);
    }
    let pairs = |vals: &[Value], idxs: &[Value]| -> Vec<cranelift_codegen::ir::BlockArg> {
        vals.iter()
            .zip(idxs)
            .flat_map(|(&v, &i)| [v.into(), i.into()])
            .collect()
    };
    let n8 = b.ins().iadd_imm_s(start, 8);
    let mut args = vec![n8.into()];
    args.extend(pairs(&vals, &idxs));
    b.ins().jump(head, &args);

    b.switch_to_block(head);
    let hp = b.block_params(head).to_vec();
    let n = hp[0];
    let (vals, idxs): (Vec<Value>, Vec<Value>) =
        (0..n_acc).map(|a| (hp[1 + 2 * a], hp[2 + 2 * a])).unzip();
    let more = b.ins().icmp(IntCC::SignedLessThan, n, end8);
    b.ins().brif(more, body, &[], merge, &pairs(&vals, &idxs));

    b.switch_to_block(body);
    let mut vals2 = Vec::new();
    let mut idxs2 = Vec::new();
    for a in 0..n_acc {
        let na = b.ins().iadd_imm_s(n, a as i64 * lc);
        let x = inputs.value(b, module, na, true)?;
        let take = cmp.in_order(b, x, vals[a]);
        vals2.push(vselect(b, take, x, vals[a]));
        let s = splat_index(b, l, na);
        let iv = b.ins().iadd(s, iota);
        idxs2.push(vselect(b, take, iv, idxs[a]));
    }
    let next = b.ins().iadd_imm_s(n, 8);
    let mut args = vec![next.into()];
    args.extend(pairs(&vals2, &idxs2));
    b.ins().jump(head, &args);

    // The eight pairs into one, in any order (ties go to the smaller position).
    b.switch_to_block(merge);
    let mp = b.block_params(merge).to_vec();
    let mut best: Option<(Value, Value)> = None;
    for a in 0..n_acc {
        for k in 0..lc as u8 {
            let v = b.ins().extractlane(mp[2 * a], k);
            let i = b.ins().extractlane(mp[2 * a + 1], k);
            let i = if l == Lanes::X32 {
                b.ins().sextend(types::I64, i)
            } else {
                i
            };
            best = Some(match best {
                None => (v, i),
                Some((bv, bi)) => {
                    let take = cmp.any_order(b, v, i, bv, bi);
                    (b.ins().select(take, v, bv), b.ins().select(take, i, bi))
                }
            });
        }
    }
    let (bv, bi) = best.expect("eight pairs");
    b.ins().jump(tail, &[end8.into(), bv.into(), bi.into()]);
    Ok(())
}
