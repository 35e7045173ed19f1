//! Rewrites of SSA functions, run in this order by `compile::optimize`: constant folding,
//! merging duplicates, Composite fusion.

pub mod fold;
pub mod fuse;
pub mod merge;

pub use fold::fold;
pub use fuse::fuse;
pub use merge::merge;
