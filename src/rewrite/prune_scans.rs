//! Dropping what no one reads from `scan`s, before the e-graph pass: a stacked output that
//! nothing reads is not stacked (its yield goes, and with it the body's work for it, which the
//! e-graph then finds dead). Most such outputs are the carries' history that every scan built
//! by `kiln::scan` keeps for its gradient (`graph::scan`): a function that takes no gradient
//! through the scan never stores it. Carries stay, since the next step reads them.

use super::read_counts;
use crate::ir::{Func, Inst, Op};

/// Removes the unread stacked outputs of every scan (nested ones included) until none is left;
/// returns how many were removed.
pub fn prune_scans(f: &mut Func) -> usize {
    let mut total = 0;
    loop {
        let reads = read_counts(f);
        let unread = |v: &crate::ir::Value| reads.get(v).copied().unwrap_or(0) == 0;
        let n = prune(&mut f.body, &unread);
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn prune(body: &mut [Inst], unread: &dyn Fn(&crate::ir::Value) -> bool) -> usize {
    let mut n = 0;
    for inst in body {
        for r in &mut inst.regions {
            n += prune(&mut r.body, unread);
        }
        let Op::Scan { carries, .. } = inst.op else {
            continue;
        };
        let [region] = inst.regions.as_mut_slice() else {
            continue;
        };
        if region.yields.len() != inst.results.len() {
            continue;
        }
        let keep: Vec<bool> = (inst.results.iter().enumerate())
            .map(|(i, r)| i < carries || !unread(r))
            .collect();
        let mut k = keep.iter();
        inst.results.retain(|_| *k.next().unwrap_or(&true));
        let mut k = keep.iter();
        region.yields.retain(|_| *k.next().unwrap_or(&true));
        n += keep.iter().filter(|&&kept| !kept).count();
    }
    n
}
