//! kiln's error type. Every user mistake is an `Err`, never a panic.

use std::fmt;
use std::panic::Location;

/// Where in the user's source a graph node was built (`#[track_caller]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    /// The source file's path, as the compiler names it (`std::panic::Location::file`).
    pub file: &'static str,
    /// The line, counted from 1.
    pub line: u32,
    /// The column, counted from 1.
    pub column: u32,
}

thread_local! {
    /// Where the nodes built now are attributed, while [`built_at`] runs.
    static BUILT_AT: std::cell::Cell<Option<SourceLoc>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with every node it builds on this thread attributed to `loc`, not to the line of
/// kiln that builds it: the gradient's nodes name the line of the user's code that built the
/// node they differentiate, in errors and profiles.
pub fn built_at<R>(loc: SourceLoc, f: impl FnOnce() -> R) -> R {
    /// Puts the previous attribution back however `f` ends.
    struct Restore(Option<SourceLoc>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUILT_AT.set(self.0);
        }
    }
    let _restore = Restore(BUILT_AT.replace(Some(loc)));
    f()
}

impl SourceLoc {
    /// Where the caller is (or, inside [`built_at`], where it says).
    #[track_caller]
    pub fn caller() -> SourceLoc {
        if let Some(at) = BUILT_AT.get() {
            return at;
        }
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
    Type {
        /// What is wrong.
        msg: String,
        /// Where the user's code built the node, when known.
        loc: Option<SourceLoc>,
    },
    /// A function was called with inputs of the wrong count, dtype or shape.
    #[error("{0}")]
    Input(String),
    /// A shape that did not fit, found at run time.
    #[error("{0}")]
    Shape(String),
    /// Something failed while running (an op's perform, a custom op's panic).
    #[error("{0}")]
    Runtime(String),
    /// The text form (or a kernel plan's text) could not be parsed or verified.
    #[error("{file}:{line}:{col}: {msg}")]
    Parse {
        /// The source's name, as given to the parser.
        file: String,
        /// The line, counted from 1; 0 for a problem found by the verifier after parsing.
        line: usize,
        /// The column, counted from 1; 0 where `line` is.
        col: usize,
        /// What is wrong.
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
    /// A type error without a source location (`Error::at` adds one).
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

/// kiln's `Result`: the error is [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;
