//! Rewrites of SSA functions. So far: Composite fusion of elementwise ops.

pub mod fuse;

pub use fuse::fuse;
