//! IR dumps (CONTRACTS.md §3). Every stage calls [`DumpOptions::dump`] with its name and a
//! closure that produces its text; the closure runs only when that stage is asked for.
//! `KILN_DUMP=input,kernels` (or `all`) picks stages; `KILN_DUMP_DIR=DIR` writes each dump to
//! `DIR/FUNC.NN.STAGE.txt` (NN: the stage's place in [`STAGES`]) instead of stderr.

use std::path::PathBuf;

/// The stages, in pipeline order; a stage's index is the NN of its dump file.
pub const STAGES: [&str; 11] = [
    "input", "grad", "egraph", "fused", "inplace", "schedule", "kernels", "clif", "llvm", "ptx",
    "asm",
];

/// Which stages to dump, and where. `Default` dumps nothing; [`DumpOptions::from_env`] reads
/// the environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpOptions {
    pub stages: Vec<String>,
    /// Write files here instead of printing to stderr.
    pub dir: Option<PathBuf>,
}

impl DumpOptions {
    pub fn from_env() -> DumpOptions {
        let stages = std::env::var("KILN_DUMP").unwrap_or_default();
        let mut opts = DumpOptions::parse(&stages);
        opts.dir = std::env::var_os("KILN_DUMP_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        opts
    }

    /// Stages from a comma-separated list (`all` for every one). Unknown names are reported on
    /// stderr once and otherwise ignored, so a typo never stops a compile.
    pub fn parse(list: &str) -> DumpOptions {
        let mut stages = Vec::new();
        for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if s == "all" {
                stages.extend(STAGES.iter().map(|s| s.to_string()));
            } else if STAGES.contains(&s) {
                stages.push(s.to_string());
            } else {
                eprintln!(
                    "kiln: KILN_DUMP names an unknown stage `{s}` (stages: all, {})",
                    STAGES.join(", ")
                );
            }
        }
        DumpOptions { stages, dir: None }
    }

    pub fn enabled(&self, stage: &str) -> bool {
        self.stages.iter().any(|s| s == stage)
    }

    /// Dumps `text()` for `stage` of function `func` if that stage is asked for.
    pub fn dump(&self, func: &str, stage: &str, text: impl FnOnce() -> String) {
        if !self.enabled(stage) {
            return;
        }
        let body = text();
        let nn = STAGES.iter().position(|s| *s == stage).unwrap_or(99);
        match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{func}.{nn:02}.{stage}.txt"));
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, &body))
                {
                    eprintln!("kiln: cannot write the dump {}: {e}", path.display());
                }
            }
            None => eprintln!(";; ---- @{func}: {stage} ----\n{body}"),
        }
    }
}
