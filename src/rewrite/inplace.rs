//! The in-place pass (Theano's destroy handler): marks instructions whose result may be written
//! into the buffer of one of their arguments, so that a step reuses memory that is still hot in
//! cache instead of taking a fresh buffer, and so that the update of a shared variable
//! (`w - lr * g`) overwrites the variable where it is.
//!
//! A mark (`Inst::inplace = Some(k)`, printed `{inplace = k}`) is a permission the runtime may
//! use: it writes result 0 into argument `k`'s buffer when that buffer's dtype, shape and layout
//! fit at run time, and computes into a fresh buffer otherwise. The pass proves the permission
//! safe:
//!
//! - **The op writes element `i` from elements `i` only.** Elementwise ops (unary, binary,
//!   select, composites with one output) with argument `k` of exactly the result's type, so
//!   that no broadcast stretches it; custom ops that say they may run in place (`inplace()` or a
//!   `destroy_map` entry `(0, 0)`), on argument 0, which handle the buffer themselves.
//!   `scatter_add` and `scatter_set` on their array (argument 0): they write only the positions
//!   they name, after checking every index, so a failed call leaves the buffer as it was.
//! - **Nothing reads the buffer afterwards.** Buffers are followed through views (`view_map`,
//!   transitively, in both directions): the argument, what it is a view of and every view of
//!   those form one alias class. No member of the class is read after the instruction in its
//!   block (a read inside a region counts at the instruction that holds the region), yielded by
//!   the block or returned by the function, and no other argument of the instruction is a
//!   member (a view of the buffer read at other indices while it is being overwritten).
//! - **The buffer is the function's to destroy.** Every member is defined in the instruction's
//!   own block (so a branch of an `ifelse` never destroys a value the other branch, or code after
//!   the `ifelse`, may read), none is a constant, and none is a parameter unless it is donated:
//!   `compile()` donates the shared variables the function updates, whose old values are
//!   dropped at the end of the call anyway.

use crate::ir::{Func, Inst, Op, Value};
use std::collections::HashMap;

/// Marks the instructions of `func` that may run in place (see the module docs). `donated`
/// parameters may be overwritten; other parameters never are. Returns the donated parameters
/// that some instruction destroys.
pub fn insert_inplace(func: &mut Func, donated: &[Value]) -> Vec<Value> {
    let aliases = AliasClasses::of(func);
    let outputs: Vec<Value> = func.outputs.clone();
    let mut destroyed = Vec::new();
    let mut body = std::mem::take(&mut func.body);
    let scope = Scope {
        func,
        aliases: &aliases,
        outputs: &outputs,
        donated,
    };
    mark_block(&scope, &mut body, &[], true, &mut destroyed);
    destroyed.sort();
    destroyed.dedup();
    if !destroyed.is_empty() && !commit_last(func, &mut body, &destroyed) {
        // A call could fail after a variable was overwritten: the variables are left alone.
        for inst in &mut body {
            if inst
                .inplace
                .is_some_and(|k| destroyed.contains(&inst.args[k]))
            {
                inst.inplace = None;
            }
        }
        destroyed.clear();
    }
    func.body = body;
    destroyed
}

/// Keeps a call's updates all or nothing: a call that returns an error must leave every
/// shared variable as it was, so the instructions that overwrite a `destroyed` parameter
/// (and what reads their results) are moved after every instruction that may fail at run time
/// (`Func::may_fail`). Returns `false` when that is impossible: an instruction that may fail
/// reads a new value (or must stay after one that does); the caller then overwrites nothing.
///
/// The move keeps each part in its order. An instruction that stays early must not overwrite,
/// in place, a value a late instruction reads (it was that value's last reader): it moves too.
fn commit_last(func: &Func, body: &mut Vec<Inst>, destroyed: &[Value]) -> bool {
    let overwrites = |inst: &Inst| inst.inplace.map(|k| inst.args[k]);
    let destroys = |inst: &Inst| overwrites(inst).is_some_and(|a| destroyed.contains(&a));
    let Some(first) = body.iter().position(destroys) else {
        return true;
    };
    if !body[first + 1..].iter().any(|i| func.may_fail(i)) {
        return true;
    }
    let reads: Vec<Vec<Value>> = body
        .iter()
        .map(|inst| {
            let mut out = inst.args.clone();
            for r in &inst.regions {
                reads_in_region(&r.body, &r.yields, &mut |v| out.push(v));
            }
            out
        })
        .collect();
    let mut late: Vec<bool> = body.iter().map(destroys).collect();
    loop {
        let mut changed = false;
        let mut late_results: Vec<Value> = Vec::new();
        let mut late_reads: Vec<Value> = Vec::new();
        for (i, inst) in body.iter().enumerate() {
            if late[i] {
                late_results.extend(&inst.results);
                late_reads.extend(&reads[i]);
            }
        }
        for (i, inst) in body.iter().enumerate() {
            if late[i] {
                continue;
            }
            let depends = reads[i].iter().any(|v| late_results.contains(v));
            let clobbers = overwrites(inst).is_some_and(|v| late_reads.contains(&v));
            if depends || clobbers {
                late[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // A late instruction may fail only while no variable is overwritten yet: before the
    // first overwrite, or as the first overwrite itself where its failure leaves its buffer
    // as it was (a scatter checks every index before it writes).
    let mut written = false;
    for (inst, _) in body.iter().zip(&late).filter(|(_, &l)| l) {
        let fails_clean = inst.inplace.is_some() && inst.op.updates_in_place() == inst.inplace;
        if func.may_fail(inst) && (written || (destroys(inst) && !fails_clean)) {
            return false;
        }
        written |= destroys(inst);
    }
    let all = std::mem::take(body);
    let (mut early, mut rest): (Vec<Inst>, Vec<Inst>) = (Vec::new(), Vec::new());
    for (inst, l) in all.into_iter().zip(late) {
        if l {
            rest.push(inst);
        } else {
            early.push(inst);
        }
    }
    early.append(&mut rest);
    *body = early;
    true
}

/// Removes every in-place mark (the function as it would run without the pass).
pub fn clear_inplace(func: &mut Func) {
    fn clear(body: &mut [Inst]) {
        for inst in body {
            inst.inplace = None;
            for r in &mut inst.regions {
                clear(&mut r.body);
            }
        }
    }
    clear(&mut func.body);
}

struct Scope<'a> {
    func: &'a Func,
    aliases: &'a AliasClasses,
    outputs: &'a [Value],
    donated: &'a [Value],
}

/// Values that may share a buffer: a union-find over the `view_map` edges of every instruction.
struct AliasClasses {
    parent: Vec<usize>,
    /// The values of each class with more than one, by its root.
    members: HashMap<usize, Vec<Value>>,
}

impl AliasClasses {
    fn of(func: &Func) -> AliasClasses {
        fn visit(body: &[Inst], classes: &mut AliasClasses) {
            for inst in body {
                for (o, i) in inst.op.view_map() {
                    if let (Some(&r), Some(&a)) = (inst.results.get(o), inst.args.get(i)) {
                        classes.union(r.index(), a.index());
                    }
                }
                for r in &inst.regions {
                    visit(&r.body, classes);
                }
            }
        }
        let mut classes = AliasClasses {
            parent: (0..func.values.len()).collect(),
            members: HashMap::new(),
        };
        visit(&func.body, &mut classes);
        let mut members: HashMap<usize, Vec<Value>> = HashMap::new();
        for v in 0..func.values.len() {
            members
                .entry(classes.find(v))
                .or_default()
                .push(Value(v as u32));
        }
        members.retain(|_, m| m.len() > 1);
        classes.members = members;
        classes
    }

    /// The values that may share `v`'s buffer, `v` included.
    fn members(&self, v: Value) -> std::borrow::Cow<'_, [Value]> {
        match self.members.get(&self.find(v.index())) {
            Some(m) => std::borrow::Cow::Borrowed(m),
            None => std::borrow::Cow::Owned(vec![v]),
        }
    }

    fn find(&self, mut v: usize) -> usize {
        while self.parent[v] != v {
            v = self.parent[v];
        }
        v
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }

    fn same(&self, a: Value, b: Value) -> bool {
        self.find(a.index()) == self.find(b.index())
    }
}

/// Marks one block (the top-level body, or a region with its `yields`), then the regions nested
/// in it.
fn mark_block(
    scope: &Scope<'_>,
    body: &mut [Inst],
    yields: &[Value],
    top_level: bool,
    destroyed: &mut Vec<Value>,
) {
    let end = body.len();
    // Where each value is last read in this block, and which values the block owns.
    let mut last_read: HashMap<Value, usize> = HashMap::new();
    let mut owned: HashMap<Value, Option<&Op>> = HashMap::new();
    for (pos, inst) in body.iter().enumerate() {
        let mut read = |v: Value| {
            let e = last_read.entry(v).or_insert(pos);
            *e = (*e).max(pos);
        };
        inst.args.iter().copied().for_each(&mut read);
        for r in &inst.regions {
            reads_in_region(&r.body, &r.yields, &mut read);
        }
        for &r in &inst.results {
            owned.insert(r, Some(&inst.op));
        }
    }
    for &y in yields {
        last_read.insert(y, end);
    }
    if top_level {
        for &o in scope.outputs {
            last_read.insert(o, usize::MAX);
        }
        for &p in scope.donated {
            owned.insert(p, None);
        }
    }
    let marks: Vec<Option<usize>> = body
        .iter()
        .enumerate()
        .map(|(pos, inst)| {
            // A donated parameter first: overwriting it is what keeps an updated variable in
            // its buffer, and the other dead argument goes back to the pool.
            let mut ks = candidates(scope.func, inst);
            ks.sort_by_key(|&k| !scope.donated.contains(&inst.args[k]));
            ks.into_iter().find(|&k| {
                let a = inst.args[k];
                let class = scope.aliases.members(a);
                let free = class.iter().all(|m| {
                    let mine = match owned.get(m) {
                        Some(Some(op)) => !matches!(op, Op::Const(_)),
                        Some(None) => true,
                        None => false,
                    };
                    let unread_after = last_read.get(m).is_none_or(|&p| p <= pos);
                    mine && unread_after
                });
                let lone = inst
                    .args
                    .iter()
                    .all(|&b| b == a || !scope.aliases.same(a, b));
                free && lone
            })
        })
        .collect();
    for (inst, mark) in body.iter_mut().zip(marks) {
        inst.inplace = mark;
        if let Some(k) = mark {
            if scope.donated.contains(&inst.args[k]) {
                destroyed.push(inst.args[k]);
            }
        }
        for r in &mut inst.regions {
            let ys = r.yields.clone();
            mark_block(scope, &mut r.body, &ys, false, destroyed);
        }
    }
}

/// Every value read inside a region (its nested regions included) or yielded by it.
fn reads_in_region(body: &[Inst], yields: &[Value], read: &mut impl FnMut(Value)) {
    for inst in body {
        inst.args.iter().copied().for_each(&mut *read);
        for r in &inst.regions {
            reads_in_region(&r.body, &r.yields, read);
        }
    }
    yields.iter().copied().for_each(read);
}

/// The arguments `inst` could overwrite with its result 0, best first.
fn candidates(func: &Func, inst: &Inst) -> Vec<usize> {
    match &inst.op {
        Op::Custom(c) => {
            let may = c.inplace() || c.destroy_map().contains(&(0, 0));
            if may && !inst.args.is_empty() && !inst.results.is_empty() {
                vec![0]
            } else {
                vec![]
            }
        }
        // A scatter updates its array where it is (`Op::updates_in_place`), when the array
        // has the result's type.
        op if op.updates_in_place().is_some() => op
            .updates_in_place()
            .filter(|&k| func.ty(inst.args[k]) == func.ty(inst.results[0]))
            .into_iter()
            .collect(),
        op if op.is_elementwise() && inst.results.len() == 1 => {
            let ty = func.ty(inst.results[0]);
            (0..inst.args.len())
                .filter(|&k| func.ty(inst.args[k]) == ty)
                .collect()
        }
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::text::parse;

    fn marks(src: &str, donated: &[&str]) -> Vec<(String, Option<usize>)> {
        let mut f = parse("t.kir", src).unwrap().remove(0);
        let donated: Vec<Value> = f
            .params
            .iter()
            .copied()
            .filter(|&p| donated.contains(&f.name_of(p).unwrap()))
            .collect();
        insert_inplace(&mut f, &donated);
        let mut out = Vec::new();
        fn walk(f: &Func, body: &[Inst], out: &mut Vec<(String, Option<usize>)>) {
            for i in body {
                let name = f.name_of(i.results[0]).unwrap_or("?").to_string();
                out.push((name, i.inplace));
                for r in &i.regions {
                    walk(f, &r.body, out);
                }
            }
        }
        walk(&f, &f.body, &mut out);
        out
    }

    fn mark_of(m: &[(String, Option<usize>)], name: &str) -> Option<usize> {
        m.iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn a_dead_temporary_is_overwritten_and_a_live_one_is_not() {
        let m = marks(
            "func @f(%x: f32[4], %y: f32[4]) -> (f32[4], f32[4]) {
               %a = exp %x
               %b = add %a, %y
               %c = sin %x
               %d = mul %c, %c
               %e = neg %c
               return %b, %e
             }",
            &[],
        );
        assert_eq!(mark_of(&m, "a"), None, "a parameter is never overwritten");
        assert_eq!(mark_of(&m, "b"), Some(0));
        assert_eq!(mark_of(&m, "d"), None, "%c is read after %d");
        assert_eq!(mark_of(&m, "e"), Some(0));
    }
}
