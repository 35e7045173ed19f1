//! Broadcasts that elementwise steps do themselves: a `broadcast_to` read only by elementwise
//! instructions (maps, and reductions of a fused elementwise program), each of which has
//! another operand of the full shape, is dropped and its readers read its input instead. A
//! kernel broadcasts its operands (stride 0), so the
//! copy was pure cost: in W5 the softmax cross-entropy's gradient broadcast two 256 x 1
//! columns to 256 x 10 through `perform`, about 10 us each, and the readers' results do not
//! change (each element reads the same value).
//!
//! The input then lives until the last of those readers. Where a step in between may write
//! over the input's buffer (an in-place mark the in-place pass set because the broadcast was
//! its last reader), the broadcast stays.

use crate::ir::{Func, Inst, Op, Value};
use std::collections::HashMap;

/// `body` without the broadcasts that its elementwise readers can do themselves.
pub(super) fn fold(func: &Func, body: &[Inst], kept: &[Value]) -> Vec<Inst> {
    let mut readers: HashMap<Value, Vec<usize>> = HashMap::new();
    for (pos, inst) in body.iter().enumerate() {
        for v in super::reads(inst) {
            let r = readers.entry(v).or_default();
            if r.last() != Some(&pos) {
                r.push(pos);
            }
        }
    }
    let mut out = body.to_vec();
    let mut removed = vec![false; body.len()];
    for (pos, inst) in body.iter().enumerate() {
        let (Op::BroadcastTo { .. }, &[x], &[r]) = (&inst.op, &inst.args[..], &inst.results[..])
        else {
            continue;
        };
        let (Some(shape), Some(rs)) = (func.ty(r).known_shape(), readers.get(&r)) else {
            continue;
        };
        if kept.contains(&r) {
            continue;
        }
        // Each reader elementwise (or a reduction of an elementwise program, whose operands
        // broadcast alike), reading `r` only as an argument, with another argument of the
        // full shape (so its result's shape stays).
        let full = |a: Value| func.ty(a).known_shape().as_ref() == Some(&shape);
        let elementwise = rs.iter().all(|&q| {
            let i = &out[q];
            (i.op.is_elementwise() || matches!(i.op, Op::FusedReduce { .. }))
                && i.regions.is_empty()
                && i.args.iter().any(|&a| a != r && full(a))
        });
        let last = *rs.last().unwrap_or(&pos);
        if !elementwise || overwrites(&out[pos + 1..=last], x) {
            continue;
        }
        for &q in rs {
            let i = &mut out[q];
            for a in i.args.iter_mut().filter(|a| **a == r) {
                *a = x;
            }
            // A mark on the broadcast operand no longer fits (the input is smaller).
            if i.inplace.is_some_and(|k| i.args[k] == x) {
                i.inplace = None;
            }
        }
        removed[pos] = true;
    }
    out.into_iter()
        .zip(removed)
        .filter(|(_, r)| !r)
        .map(|(i, _)| i)
        .collect()
}

/// Whether an instruction of `insts` (or of their regions) may write over `v`'s buffer.
fn overwrites(insts: &[Inst], v: Value) -> bool {
    insts.iter().any(|i| {
        i.inplace.is_some_and(|k| i.args.get(k) == Some(&v))
            || i.regions.iter().any(|r| overwrites(&r.body, v))
    })
}

#[cfg(test)]
mod tests {
    use super::super::{lower_with, LowerOptions};

    /// The plan of `body` (over `%x: f32[4, 1]`, `%y: f32[4, 3]`) with broadcasts folded.
    fn schedule(results: &str, body: &str) -> String {
        let src = format!("func @f(%x: f32[4, 1], %y: f32[4, 3]) -> ({results}) {{\n{body}\n}}");
        let f = crate::ir::text::parse("t.kir", &src).unwrap().remove(0);
        let opts = LowerOptions {
            fold_broadcasts: true,
            ..LowerOptions::default()
        };
        lower_with(&f, opts).to_string()
    }

    const B: &str = "%b = broadcast_to %x {shape = [4, 3]}\n";

    #[test]
    fn elementwise_readers_read_the_input() {
        let text = schedule(
            "f32[4, 3], f32[4, 3]",
            &format!("{B}%s = add %b, %y\n%t = mul %y, %b\nreturn %s, %t"),
        );
        assert!(!text.contains("broadcast_to"), "{text}");
        assert!(text.contains("= map add %0, %1 {"), "{text}");
        assert!(text.contains("= map mul %1, %0 {"), "{text}");
    }

    #[test]
    fn broadcasts_stay_where_a_reader_needs_the_copy() {
        let cases = [
            // A reduction reads it.
            (
                "f32[4]",
                format!("{B}%s = sum %b {{axes = [1]}}\nreturn %s"),
            ),
            // No other operand has the full shape: the result would shrink.
            ("f32[4, 3]", format!("{B}%s = neg %b\nreturn %s")),
            // It is an output.
            (
                "f32[4, 3], f32[4, 3]",
                format!("{B}%s = add %b, %y\nreturn %s, %b"),
            ),
            // A step in between writes over the input's buffer.
            (
                "f32[4, 1], f32[4, 3]",
                format!("{B}%n = neg %x {{inplace = 0}}\n%s = add %b, %y\nreturn %n, %s"),
            ),
        ];
        for (results, body) in cases {
            let text = schedule(results, &body);
            assert!(text.contains("view broadcast_to"), "{body}\n{text}");
        }
    }
}
