//! Running compiled functions: the reference interpreter and the `Function` users call.

pub mod interp;
