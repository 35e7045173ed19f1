//! The `kiln` command-line tool (docs/reference/cli.md); it lives in the library (`kiln::cli`) so
//! that a crate with custom ops can build its own with them registered.

fn main() -> std::process::ExitCode {
    kiln::cli::main()
}
