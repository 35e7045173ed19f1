//! Gradient accumulation into custom-op outputs (MXNet's `kAddTo`), made ready for the
//! runtime. Fusion keeps an `add` that `ir::custom::add_to_operand` accepts out of its groups
//! (`fuse.rs`); this pass then moves the custom op whose output such an add accumulates down
//! to just before the add, where nothing in between reads its results, so that the add's other
//! operand (the running sum) exists when the op runs. The runtime then hands the op that
//! buffer to add into (`runtime::requests`), and N contributions summed in any order and
//! grouping accumulate in one buffer, with no temporary per contribution.

use super::{def_positions, read_counts};
use crate::ir::custom::add_to_operand;
use crate::ir::{Func, Inst, Value};
use std::collections::HashMap;

/// Moves each accumulating custom op (top level) to just before its add, where that is legal
/// and needed (the add's other operand is defined after the op).
pub fn schedule_accumulation(func: &mut Func) {
    let reads = read_counts(func);
    let mut def_pos = def_positions(func);
    let mut q = 0;
    while q < func.body.len() {
        if let Some(p) = op_to_move(func, q, &reads, &def_pos) {
            let op = func.body.remove(p);
            // The add is now at q - 1; the op goes right before it.
            func.body.insert(q - 1, op);
            def_pos = def_positions(func);
        }
        q += 1;
    }
}

/// The position of the custom op that the add at `q` accumulates, when it should move to just
/// before the add: its accumulator is defined after it, and nothing between the two reads the
/// op's results (so it may run later).
fn op_to_move(
    func: &Func,
    q: usize,
    reads: &HashMap<Value, usize>,
    positions: &HashMap<Value, usize>,
) -> Option<usize> {
    let body = &func.body;
    let def_pos = |v: Value| positions.get(&v).copied();
    let producer = |v: Value| def_pos(v).map(|p| &body[p]);
    let count = |v: Value| reads.get(&v).copied().unwrap_or(0);
    let add = &body[q];
    let k = add_to_operand(func, add, &producer, &count)?;
    let (r, acc) = (add.args[k], add.args[1 - k]);
    let p = def_pos(r)?;
    let acc_after_op = def_pos(acc).is_some_and(|d| d > p);
    let between = &body[p + 1..q];
    let read_between = between.iter().any(|i| reads_any(i, &body[p].results));
    (acc_after_op && !read_between).then_some(p)
}

/// Whether `inst` (its regions included) reads any of `values`.
fn reads_any(inst: &Inst, values: &[Value]) -> bool {
    inst.args.iter().any(|a| values.contains(a))
        || inst.regions.iter().any(|r| {
            r.yields.iter().any(|y| values.contains(y))
                || r.body.iter().any(|i| reads_any(i, values))
        })
}
