//! IR dumps (docs/reference/environment.md). Every stage calls [`DumpOptions::dump`] with its name and a
//! closure that produces its text; the closure runs only when that stage is asked for.
//! `KILN_DUMP=input,kernels` (or `all`) picks stages; `KILN_DUMP_DIR=DIR` writes each dump to
//! `DIR/FUNC.NN.STAGE.txt` (NN: the stage's place in [`STAGES`]) instead of stderr. Each
//! compile of a function in a process writes files of its own: where an earlier compile of
//! the same name left its files, a later one writes `FUNC-2.NN.STAGE.txt`, `FUNC-3...` (see
//! [`DumpOptions::for_compile`]), so functions that share a name (the default `f`) do not
//! overwrite each other's dumps.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// The stages, in pipeline order (but `dot`, the optimized function drawn, which comes last so
/// that the others keep their numbers); a stage's index is the NN of its dump file.
pub const STAGES: [&str; 12] = [
    "input", "grad", "egraph", "fused", "inplace", "schedule", "kernels", "clif", "llvm", "ptx",
    "asm", "dot",
];

/// Which stages to dump, and where. `Default` dumps nothing; [`DumpOptions::from_env`] reads
/// the environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpOptions {
    /// The stages to dump, by name (of [`STAGES`]).
    pub stages: Vec<String>,
    /// Write files here instead of printing to stderr.
    pub dir: Option<PathBuf>,
    /// The file-name stem of this compile's function: `(its name, the stem its files get)`.
    pub file_stem: Option<(String, String)>,
}

impl DumpOptions {
    /// The stages `KILN_DUMP` names (see [`DumpOptions::parse`]) and the directory
    /// `KILN_DUMP_DIR` names, if set and not empty.
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
        DumpOptions {
            stages,
            dir: None,
            file_stem: None,
        }
    }

    /// These options for one compile of the function `func`: where dumps go to files, the
    /// compile's files are named after `func`, unless an earlier compile in this process
    /// already wrote files of that name that are still there; then after `func-2`, `func-3`,
    /// and so on. Files left by other processes are overwritten, as a fresh run expects.
    pub fn for_compile(&self, func: &str) -> DumpOptions {
        let mut out = self.clone();
        let Some(dir) = self.dir.as_ref().filter(|_| !self.stages.is_empty()) else {
            return out;
        };
        static USED: Mutex<Option<HashSet<(PathBuf, String)>>> = Mutex::new(None);
        let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
        let used = used.get_or_insert_with(HashSet::new);
        let has_files = |stem: &str| {
            STAGES
                .iter()
                .enumerate()
                .any(|(nn, stage)| dir.join(format!("{stem}.{nn:02}.{stage}.txt")).exists())
        };
        let stem = (1..)
            .map(|n| match n {
                1 => func.to_string(),
                n => format!("{func}-{n}"),
            })
            .find(|stem| !(used.contains(&(dir.clone(), stem.clone())) && has_files(stem)))
            .unwrap_or_else(|| func.to_string());
        used.insert((dir.clone(), stem.clone()));
        out.file_stem = Some((func.to_string(), stem));
        out
    }

    /// Whether `stage` is to be dumped.
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
                let stem = match &self.file_stem {
                    Some((f, stem)) if f == func => stem,
                    _ => func,
                };
                let path = dir.join(format!("{stem}.{nn:02}.{stage}.txt"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_of_one_name_write_files_of_their_own() {
        let dir = std::env::temp_dir().join(format!("kiln-dump-{}", std::process::id()));
        let opts = DumpOptions {
            dir: Some(dir.clone()),
            ..DumpOptions::parse("input")
        };
        for (k, text) in ["first", "second", "third"].into_iter().enumerate() {
            let o = opts.for_compile("twice");
            o.dump("twice", "input", || text.to_string());
            // Another function's dumps in the same compile keep their own name.
            o.dump("other", "input", || format!("other {k}"));
        }
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("twice.00.input.txt"), "first");
        assert_eq!(read("twice-2.00.input.txt"), "second");
        assert_eq!(read("twice-3.00.input.txt"), "third");
        assert_eq!(read("other.00.input.txt"), "other 2");
        // Once the folder is emptied, the plain name is free again.
        let _ = std::fs::remove_dir_all(&dir);
        let o = opts.for_compile("twice");
        o.dump("twice", "input", || "fourth".to_string());
        assert_eq!(read("twice.00.input.txt"), "fourth");
        // Without a folder nothing is counted.
        assert_eq!(
            DumpOptions::parse("input").for_compile("twice").file_stem,
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
