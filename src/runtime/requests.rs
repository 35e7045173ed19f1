//! MXNet's write requests, planned once per function for its custom ops: an output nobody reads
//! gets `Null`; an output whose only reader is an `add` with a buffer that dies there gets
//! `AddTo` into that buffer (gradient accumulation without a temporary; which adds qualify is
//! `ir::custom::add_to_operand`), and the `add` is skipped. (`WriteInplace` is decided per call from liveness, in the interpreter.)

use crate::ir::{Func, Op, Value};
use std::collections::{HashMap, HashSet};

/// The write requests of a function's custom-op outputs (see the module docs).
#[derive(Default)]
pub struct WritePlan {
    /// Visible custom-op outputs that nothing reads.
    pub null: HashSet<Value>,
    /// A custom-op output -> (the buffer it accumulates into, the `add` result it stands for).
    pub add_to: HashMap<Value, (Value, Value)>,
    /// `add` results computed by an `AddTo` instead: result -> the custom-op output.
    pub skipped_adds: HashMap<Value, Value>,
}

/// The write requests of `func`'s custom-op outputs, from who reads each output and where the
/// values die (top-level body only; reads inside regions count at their instruction).
pub fn plan(func: &Func) -> WritePlan {
    // Top-level positions of every read (a read inside a region counts at its instruction).
    let mut readers: HashMap<Value, Vec<usize>> = HashMap::new();
    fn visit(body: &[crate::ir::Inst], pos: usize, readers: &mut HashMap<Value, Vec<usize>>) {
        for inst in body {
            for &a in &inst.args {
                readers.entry(a).or_default().push(pos);
            }
            for r in &inst.regions {
                visit(&r.body, pos, readers);
                for &y in &r.yields {
                    readers.entry(y).or_default().push(pos);
                }
            }
        }
    }
    let mut def_pos: HashMap<Value, usize> = HashMap::new();
    for (pos, inst) in func.body.iter().enumerate() {
        visit(std::slice::from_ref(inst), pos, &mut readers);
        for &r in &inst.results {
            def_pos.insert(r, pos);
        }
    }
    for &o in &func.outputs {
        readers.entry(o).or_default().push(usize::MAX);
    }
    let mut plan = WritePlan::default();
    for inst in &func.body {
        let Op::Custom(c) = &inst.op else { continue };
        let visible = inst.results.len() - c.num_hidden_outputs();
        for &r in &inst.results[..visible] {
            if readers.get(&r).is_none_or(Vec::is_empty) {
                plan.null.insert(r);
            }
        }
    }
    let producer = |v: Value| def_pos.get(&v).map(|&p| &func.body[p]);
    let reads = |v: Value| readers.get(&v).map_or(0, Vec::len);
    for (q, add) in func.body.iter().enumerate() {
        let Some(k) = crate::ir::custom::add_to_operand(func, add, &producer, &reads) else {
            continue;
        };
        let (r, a) = (add.args[k], add.args[1 - k]);
        let p = def_pos[&r];
        // The buffer must be a temporary made before the op and read by nothing else from
        // the op on: it is handed to the op and comes back holding the sum. (The optimizer
        // schedules the op next to its add where it can: `rewrite::accumulate`.)
        let made_before = def_pos.get(&a).is_some_and(|&d| d < p) && !func.params.contains(&a);
        let free = readers.get(&a).is_some_and(|rs| {
            rs.iter().all(|&x| x < p || x == q) && rs.iter().filter(|&&x| x == q).count() == 1
        });
        if made_before && free {
            plan.add_to.insert(r, (a, add.results[0]));
            plan.skipped_adds.insert(add.results[0], r);
        }
    }
    plan
}
