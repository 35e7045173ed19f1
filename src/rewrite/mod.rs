//! Rewrites of SSA functions, run in this order by [`optimize`] (`pipeline.rs`): the e-graph pass
//! ([`egraph`]: merging duplicates, folding constants, canonicalizing, stabilizing and
//! specializing rules, extraction by cost), merging inside regions with the values around them
//! ([`merge_regions`]), Composite fusion ([`fuse`]), scheduling custom ops next to the adds
//! that accumulate their outputs ([`accumulate`]), then the in-place pass ([`inplace`]).

pub mod accumulate;
pub mod egraph;
pub mod fuse;
pub mod inplace;
pub mod merge_regions;
mod pipeline;

pub use egraph::simplify;
pub use fuse::fuse;
pub use merge_regions::merge_regions;
pub use pipeline::{optimize, optimize_donating, OptimizeOptions};

use crate::ir::{Func, Inst, Value};
use std::collections::HashSet;

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
