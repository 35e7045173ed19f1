//! Rewrites of SSA functions, run in this order by `compile::optimize`: constant folding,
//! local algebraic and stabilizing rules, merging duplicates, Composite fusion.

pub mod fold;
pub mod fuse;
pub mod merge;
pub mod rules;

pub use fold::fold;
pub use fuse::fuse;
pub use merge::merge;
pub use rules::simplify;

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
