//! Rewrites of SSA functions, run in this order by [`optimize`] (`pipeline.rs`): dropping the
//! unread outputs of scans ([`prune_scans`](mod@prune_scans)), moving work out of scan loops
//! ([`scan_pushout`]), the e-graph pass
//! ([`egraph`]: merging duplicates, folding constants, canonicalizing, stabilizing and
//! specializing rules, extraction by cost), merging inside regions with the values around them
//! ([`merge_regions`](mod@merge_regions)), Composite fusion ([`fuse`](mod@fuse)), scheduling custom ops next to the adds
//! that accumulate their outputs ([`accumulate`]), then the in-place pass ([`inplace`]).

pub mod accumulate;
pub mod egraph;
pub mod fuse;
pub mod inplace;
pub mod merge_regions;
mod pipeline;
pub mod prune_scans;
pub mod scan_pushout;

pub use egraph::simplify;
pub use fuse::fuse;
pub use merge_regions::merge_regions;
pub use pipeline::{optimize, optimize_donating, OptimizeOptions};
pub use prune_scans::prune_scans;

use crate::ir::{Func, Inst, Region, Value};
use std::collections::{HashMap, HashSet};

/// How often each value is read: by instructions (in any region), regions' yields and the
/// function's outputs.
pub(crate) fn read_counts(func: &Func) -> HashMap<Value, usize> {
    let mut reads = HashMap::new();
    count_reads(&func.body, &mut reads);
    for &o in &func.outputs {
        *reads.entry(o).or_default() += 1;
    }
    reads
}

/// Adds to `reads` how often `body` reads each value: its instructions' arguments and, at
/// any depth, its regions' instructions and yields.
pub(crate) fn count_reads(body: &[Inst], reads: &mut HashMap<Value, usize>) {
    for i in body {
        for &a in &i.args {
            *reads.entry(a).or_default() += 1;
        }
        for r in &i.regions {
            count_reads(&r.body, reads);
            for &y in &r.yields {
                *reads.entry(y).or_default() += 1;
            }
        }
    }
}

/// Where each value is defined in the top-level body (its instruction's position).
pub(crate) fn def_positions(func: &Func) -> HashMap<Value, usize> {
    (func.body.iter().enumerate())
        .flat_map(|(i, inst)| inst.results.iter().map(move |&r| (r, i)))
        .collect()
}

/// Every value something reads: an instruction (in any region), a region's yield, or the
/// function's outputs.
pub(crate) fn read_values(f: &Func) -> HashSet<Value> {
    fn mark(body: &[Inst], read: &mut HashSet<Value>) {
        for i in body {
            read.extend(i.args.iter().copied());
            for r in &i.regions {
                mark(&r.body, read);
                read.extend(r.yields.iter().copied());
            }
        }
    }
    let mut read: HashSet<Value> = f.outputs.iter().copied().collect();
    mark(&f.body, &mut read);
    read
}

/// The values a region reads that it does not define (nor take as parameters), in the order
/// first read.
pub(crate) fn free_values(r: &Region) -> Vec<Value> {
    fn walk(body: &[Inst], yields: &[Value], defined: &mut HashSet<Value>, out: &mut Vec<Value>) {
        let read = |v: Value, defined: &HashSet<Value>, out: &mut Vec<Value>| {
            if !defined.contains(&v) && !out.contains(&v) {
                out.push(v);
            }
        };
        for i in body {
            for &a in &i.args {
                read(a, defined, out);
            }
            for r in &i.regions {
                defined.extend(r.params.iter().copied());
                walk(&r.body, &r.yields, defined, out);
            }
            defined.extend(i.results.iter().copied());
        }
        for &y in yields {
            read(y, defined, out);
        }
    }
    let mut out = Vec::new();
    let mut defined: HashSet<Value> = r.params.iter().copied().collect();
    walk(&r.body, &r.yields, &mut defined, &mut out);
    out
}

/// Runs `pass` on region `r` (of a function whose value arena is `f`'s) as a function of its
/// own: the region's parameters (a scan's), then the values it reads from outside, are that
/// function's parameters and its yields are the outputs, so a pass sees nothing of the code
/// around the region and moves nothing into it or out of it.
pub(crate) fn on_region(f: &mut Func, r: &mut Region, pass: impl FnOnce(Func) -> Func) {
    let mut params = r.params.clone();
    params.extend(free_values(r));
    let sub = Func {
        name: f.name.clone(),
        values: std::mem::take(&mut f.values),
        params,
        body: std::mem::take(&mut r.body),
        outputs: std::mem::take(&mut r.yields),
    };
    let out = pass(sub);
    f.values = out.values;
    r.body = out.body;
    r.yields = out.outputs;
}
