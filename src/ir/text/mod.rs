//! The text form of the IR (docs/reference/text-form.md): a printer and a parser that round-trip.
//!
//! Spelling choices the contract leaves open: omitted slice bounds are written `null`
//! (`slice %x {starts = [null], stops = [null], steps = [-1]}` reverses an axis); `keepdims`
//! and `axes` are omitted when false and "all"; a custom op is `custom "NAME" %args {attrs}`;
//! `ifelse` writes its result types after the `else` region's closing brace.

mod attrs;
mod lexer;
mod parser;
mod printer;

pub use attrs::{float_text, inst_attrs, parse_float};
pub use parser::{parse_funcs, parse_literal, parse_op, ParseError};
pub use printer::{literal, op_head, print_func, print_funcs};

use crate::error::Error;
use crate::ir::Func;

/// Parses `src` (named `file` in errors) into its functions, then verifies them.
pub fn parse(file: &str, src: &str) -> Result<Vec<Func>, Vec<Error>> {
    let mut funcs = parse_funcs(src).map_err(|es| {
        es.into_iter()
            .map(|e| e.into_error(file))
            .collect::<Vec<_>>()
    })?;
    // Values know their line and column; messages name the file too.
    for f in &mut funcs {
        for v in &mut f.values {
            if let Some(l) = &mut v.loc {
                *l = format!("{file}:{l}");
            }
        }
    }
    for f in &funcs {
        crate::ir::verify::verify(f).map_err(|es| {
            es.into_iter()
                .map(|m| Error::Parse {
                    file: file.to_string(),
                    line: 0,
                    col: 0,
                    msg: m,
                })
                .collect::<Vec<_>>()
        })?;
    }
    Ok(funcs)
}

/// Parses a single-function source; the first error only.
pub fn parse_one(file: &str, src: &str) -> Result<Func, Error> {
    let mut fs = parse(file, src).map_err(|mut es| es.remove(0))?;
    Ok(fs.remove(0))
}
