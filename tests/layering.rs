//! The layering of `src/` (docs/architecture.md): each top-level module imports only modules
//! of lower layers, or of its own layer without a cycle; the backends are siblings that never
//! import one another. Read from the source, so a new `use crate::...` that breaks the rule
//! fails here with the file that says it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first. A module not listed here fails the test: place it.
const LAYERS: &[&[&str]] = &[
    // The foundation: dtypes, types, the SSA function and its text form, tensors, errors, and
    // what every stage may call (math expansions, the GEMM, the random stream, dumps), and
    // shared variables' storage.
    &[
        "error", "tensor", "shared", "ir", "math", "gemm", "random", "dump",
    ],
    // What reads the IR: the user's graph and its custom ops, the reference implementation of
    // each op, the kernel plan, `.npy` files.
    &["graph", "custom", "perform", "lower", "npy"],
    // Passes over the graph and the IR, the code generators over the plan, and `nn`, which
    // builds graphs of ops (it reads `graph` alone).
    &["grad", "rewrite", "codegen", "nn"],
    // The VM over the plan.
    &["runtime"],
    // The backends: siblings.
    &["jit_cpu", "jit_ptx", "aot"],
    // The driver.
    &["compile"],
    // What uses the driver.
    &["gradcheck", "cli", "lib", "bin"],
];

/// Backends never import one another.
const SIBLINGS: &[&str] = &["jit_cpu", "jit_ptx", "aot"];

/// Names the crate root re-exports, and the module each comes from (macros included).
const ROOT_NAMES: &[(&str, &str)] = &[
    ("for_each_dtype", "tensor"),
    ("for_each_ref", "tensor"),
    ("map_tensor", "tensor"),
    ("Tensor", "tensor"),
    ("TensorRef", "tensor"),
    ("Error", "error"),
    ("Result", "error"),
    ("SourceLoc", "error"),
    ("DType", "ir"),
    ("TensorType", "ir"),
    ("Function", "runtime"),
    ("CompileOptions", "compile"),
    ("Backend", "compile"),
    ("FunctionBuilder", "compile"),
    ("function", "compile"),
    ("compile_func", "compile"),
    ("grad", "grad"),
    ("verify_grad", "gradcheck"),
    ("VerifyOptions", "gradcheck"),
    ("Graph", "graph"),
    ("Var", "graph"),
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("src/{module} is in no layer of tests/layering.rs: place it"))
}

/// The source without comments (line comments, doc comments included), so prose that names a
/// module is not an import.
fn strip_comments(src: &str) -> String {
    src.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal (a URL, say) is rare in this crate; the cost of
            // cutting one is a missed import, never a false failure.
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segments after `crate::` in `src`: `crate::ir::Func` gives `ir`,
/// `crate::{ir, tensor::Tensor}` gives `ir` and `tensor`.
fn crate_refs(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in src.match_indices("crate::") {
        let rest = &src[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split at commas outside nested braces.
            let mut depth = 0;
            let mut start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(group[start..k].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(group[start..k].trim()));
                        start = k + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

fn module_of_root_name(name: &str) -> Option<&'static str> {
    ROOT_NAMES.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
}

/// Every top-level module of `src/` and, per module, `(imported module, file)` pairs.
fn imports() -> BTreeMap<String, BTreeSet<(String, String)>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .expect("src/ is readable")
        .map(|e| {
            let p = e.expect("an entry of src/").path();
            p.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("a readable folder") {
            let p = e.expect("a folder entry").path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let module = top.trim_end_matches(".rs").to_string();
            let text = strip_comments(&std::fs::read_to_string(&p).expect("a readable file"));
            let entry = out.entry(module.clone()).or_default();
            for r in crate_refs(&text) {
                let target = if modules.contains(&r) {
                    r
                } else if let Some(m) = module_of_root_name(&r) {
                    m.to_string()
                } else {
                    panic!(
                        "{}: `crate::{r}` is neither a module of src/ nor a root name \
                         listed in tests/layering.rs",
                        rel.display()
                    );
                };
                if target != module {
                    entry.insert((target, rel.display().to_string()));
                }
            }
        }
    }
    out
}

#[test]
fn modules_import_only_lower_layers_and_backends_not_each_other() {
    let imports = imports();
    let mut wrong = Vec::new();
    for (module, uses) in &imports {
        let layer = layer_of(module);
        for (target, file) in uses {
            let t = layer_of(target);
            if t > layer {
                wrong.push(format!(
                    "{file}: {module} (layer {layer}) imports {target} (layer {t}), above it"
                ));
            }
            if SIBLINGS.contains(&module.as_str()) && SIBLINGS.contains(&target.as_str()) {
                wrong.push(format!("{file}: backend {module} imports backend {target}"));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn modules_import_each_other_without_cycles() {
    let imports = imports();
    let graph: BTreeMap<&str, BTreeSet<&str>> = imports
        .iter()
        .map(|(m, uses)| (m.as_str(), uses.iter().map(|(t, _)| t.as_str()).collect()))
        .collect();
    // `ir` and `tensor` are one unit: constants in the IR are tensors, tensors have the IR's
    // dtypes. Every other pair of modules must not reach each other.
    fn unit(m: &str) -> &str {
        if m == "tensor" {
            "ir"
        } else {
            m
        }
    }
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, ts) in &graph {
        for t in ts {
            if unit(m) != unit(t) {
                edges.entry(unit(m)).or_default().insert(unit(t));
            }
        }
    }
    // Depth-first search for a back edge, reporting the cycle's path.
    fn visit<'a>(
        m: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        state.insert(m, 1);
        path.push(m);
        for &t in edges.get(m).into_iter().flatten() {
            match state.get(t) {
                Some(1) => {
                    let start = path.iter().position(|&p| p == t).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(t);
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(t, edges, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(m, 2);
        None
    }
    let mut state = BTreeMap::new();
    for &m in edges.keys() {
        if !state.contains_key(m) {
            let cycle = visit(m, &edges, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle: {}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
}

#[test]
fn the_import_reader_sees_paths_and_groups() {
    let refs =
        crate_refs("use crate::{ir::{Func, Op}, tensor::Tensor};\nlet x = crate::math::exp;");
    let want: BTreeSet<String> = ["ir", "tensor", "math"].map(String::from).into();
    assert_eq!(refs, want);
    assert_eq!(strip_comments("a // crate::x\nb"), "a \nb");
}
