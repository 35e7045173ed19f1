//! Merging duplicates (Theano's MergeOptimizer): two instructions applying equal ops to the same
//! arguments compute the same values, so the second is dropped and its results replaced by the
//! first's. Constants with equal contents merge too. Ops whose results depend on more than their
//! arguments are left alone: custom ops that ask for a random generator (seeded by position) or
//! keep hidden state, and `ifelse` (its regions are not compared).

use crate::custom::Resource;
use crate::ir::{Func, Inst, Op, Value};
use std::collections::HashMap;

fn mergeable(op: &Op) -> bool {
    match op {
        Op::IfElse => false,
        Op::Custom(c) => c.num_hidden_outputs() == 0 && !c.resources().contains(&Resource::Random),
        _ => true,
    }
}

/// Merges duplicate instructions of the top-level body and of each region (a region may reuse
/// what was computed before it, but nothing moves out of a region).
pub fn merge(func: &Func) -> Func {
    let mut f = func.clone();
    let mut subst: HashMap<Value, Value> = HashMap::new();
    let body = std::mem::take(&mut f.body);
    f.body = merge_block(body, &mut subst, &HashMap::new());
    let map = |v: &mut Value, subst: &HashMap<Value, Value>| {
        if let Some(&s) = subst.get(v) {
            *v = s;
        }
    };
    f.outputs.iter_mut().for_each(|v| map(v, &subst));
    f
}

type Key = (Op, Vec<Value>);

fn merge_block(
    body: Vec<Inst>,
    subst: &mut HashMap<Value, Value>,
    outer: &HashMap<Key, Vec<Value>>,
) -> Vec<Inst> {
    let mut seen: HashMap<Key, Vec<Value>> = outer.clone();
    let mut out = Vec::with_capacity(body.len());
    for mut inst in body {
        for a in inst.args.iter_mut() {
            if let Some(&s) = subst.get(a) {
                *a = s;
            }
        }
        for r in inst.regions.iter_mut() {
            let inner = std::mem::take(&mut r.body);
            r.body = merge_block(inner, subst, &seen);
            for y in r.yields.iter_mut() {
                if let Some(&s) = subst.get(y) {
                    *y = s;
                }
            }
        }
        if mergeable(&inst.op) {
            let key = (inst.op.clone(), inst.args.clone());
            if let Some(prev) = seen.get(&key) {
                for (r, &p) in inst.results.iter().zip(prev) {
                    subst.insert(*r, p);
                }
                continue;
            }
            seen.insert(key, inst.results.clone());
        }
        out.push(inst);
    }
    out
}
