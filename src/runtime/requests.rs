//! MXNet's write requests, planned once per function for its custom ops: an output nobody reads
//! gets `Null`; an output whose only reader is an `add` with a buffer that dies there gets
//! `AddTo` into that buffer (gradient accumulation without a temporary), and the `add` is
//! skipped. (`WriteInplace` is decided per call from liveness, in the interpreter.)

use crate::ir::{BinaryOp, Func, Op, Value};
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct WritePlan {
    /// Visible custom-op outputs that nothing reads.
    pub null: HashSet<Value>,
    /// A custom-op output -> (the buffer it accumulates into, the `add` result it stands for).
    pub add_to: HashMap<Value, (Value, Value)>,
    /// `add` results computed by an `AddTo` instead: result -> the custom-op output.
    pub skipped_adds: HashMap<Value, Value>,
}

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
    for (p, inst) in func.body.iter().enumerate() {
        let Op::Custom(c) = &inst.op else { continue };
        let visible = inst.results.len() - c.num_hidden_outputs();
        for &r in &inst.results[..visible] {
            let reads = readers.get(&r).map(Vec::as_slice).unwrap_or(&[]);
            if reads.is_empty() {
                plan.null.insert(r);
                continue;
            }
            if !c.supports_add_to() || reads.len() != 1 || reads[0] == usize::MAX {
                continue;
            }
            let q = reads[0];
            let add = &func.body[q];
            if add.op != Op::Binary(BinaryOp::Add) || add.args[0] == add.args[1] {
                continue;
            }
            let a = if add.args[0] == r {
                add.args[1]
            } else {
                add.args[0]
            };
            let same_type = func.ty(a) == func.ty(r) && func.ty(add.results[0]) == func.ty(r);
            // The buffer must be a temporary made before the op and read by nothing else from
            // the op on: it is handed to the op and comes back holding the sum.
            let made_before = def_pos.get(&a).is_some_and(|&d| d < p) && !func.params.contains(&a);
            let free = readers.get(&a).is_some_and(|rs| {
                rs.iter().all(|&x| x < p || x == q) && rs.iter().filter(|&&x| x == q).count() == 1
            });
            if same_type && made_before && free {
                plan.add_to.insert(r, (a, add.results[0]));
                plan.skipped_adds.insert(add.results[0], r);
            }
        }
    }
    plan
}
