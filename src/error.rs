//! kiln's error type. Every user mistake is an `Err`, never a panic.

use std::fmt;
use std::panic::Location;

/// Where in the user's source a graph node was built (`#[track_caller]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    pub file: &'static str,
    pub line: u32,
    pub column: u32,
}

impl SourceLoc {
    #[track_caller]
    pub fn caller() -> SourceLoc {
        let l = Location::caller();
        SourceLoc {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Everything that can go wrong in kiln.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// An op was applied to inputs of the wrong types (make_node failed).
    #[error("{}{msg}", loc.map(|l| format!("{l}: ")).unwrap_or_default())]
    Type { msg: String, loc: Option<SourceLoc> },
    /// A function was called with inputs of the wrong count, dtype or shape.
    #[error("{0}")]
    Input(String),
    /// A shape that did not fit, found at run time.
    #[error("{0}")]
    Shape(String),
    /// Something failed while running (an op's perform, a custom op's panic).
    #[error("{0}")]
    Runtime(String),
    /// The text form could not be parsed or verified.
    #[error("{file}:{line}:{col}: {msg}")]
    Parse {
        file: String,
        line: usize,
        col: usize,
        msg: String,
    },
    /// A gradient could not be taken.
    #[error("{0}")]
    Grad(String),
    /// The chosen backend cannot do this.
    #[error("{0}")]
    Unsupported(String),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(String),
}

impl Error {
    pub fn ty(msg: impl Into<String>) -> Error {
        Error::Type {
            msg: msg.into(),
            loc: None,
        }
    }

    /// Attaches a source location to a type error that has none.
    pub fn at(self, l: SourceLoc) -> Error {
        match self {
            Error::Type { msg, loc: None } => Error::Type { msg, loc: Some(l) },
            e => e,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
