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
