//! Functions as Graphviz DOT (`kiln::ir::dot`, `KILN_DUMP=dot`, `kiln opt --dot`): fused
//! kernels are clusters holding their scalar programs, branches and loop bodies clusters of
//! their own, and `dot -Tsvg` draws the text (Debian's `graphviz`; without `dot` the drawing
//! is skipped unless `KILN_REQUIRE_DOT=1`, which CI sets).

use kiln::ir::dot::func_to_dot;
use kiln::ir::text::parse_one;
use std::process::Command;

const SRC: &str = r#"
func @f(%c: bool[], %x: f32[4, ?], %h0: f32[3], %xs: f32[?, 3]) -> (f32[4, ?], f32[4], f32[3]) {
  %m = max %x {axes = [1], keepdims = true}
  %d = sub %x, %m
  %e = exp %d
  %s = sum %e {axes = [1]}
  %r = ifelse %c {
    %n = neg %e
    yield %n
  } else {
    yield %e
  }
  %h, %ys = scan %h0, %xs {carries = 1} (%k: f32[3], %t: f32[3]) {
    %a = add %k, %t
    %b = tanh %a
    yield %b, %b
  } : (f32[3], f32[?, 3])
  return %r, %s, %h
}
"#;

/// The optimized function's DOT text.
fn optimized_dot() -> String {
    let f = parse_one("f.kir", SRC).unwrap();
    let f = kiln::compile::optimize(f, &kiln::CompileOptions::default());
    func_to_dot(&f)
}

/// `text` drawn by `dot -Tsvg`: the SVG, or `None` where there is no `dot` (and CI does not
/// require one).
fn svg(text: &str) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("kiln-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.dot");
    std::fs::write(&file, text).unwrap();
    let out = Command::new("dot").arg("-Tsvg").arg(&file).output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) => {
            assert!(
                o.status.success(),
                "dot refused the graph:\n{}\n{text}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(String::from_utf8(o.stdout).unwrap())
        }
        Err(_) if std::env::var("KILN_REQUIRE_DOT").is_ok_and(|v| v == "1") => {
            panic!("KILN_REQUIRE_DOT=1 but `dot` (graphviz) does not run")
        }
        Err(_) => None,
    }
}

#[test]
fn fused_kernels_branches_and_loop_bodies_are_clusters_and_dot_draws_them() {
    let text = optimized_dot();
    assert!(text.starts_with("digraph \"@f\" {"), "{text}");
    // The softmax's sub and exp are one kernel: a cluster holding the program's ops.
    let kernel = text.find("one kernel").expect("a fused kernel's cluster");
    let cluster = &text[text[..kernel].rfind("subgraph").unwrap()..];
    let cluster = &cluster[..cluster.find("\n  }").unwrap()];
    for op in ["sub : f32", "exp : f32", "input 0 : f32"] {
        assert!(
            cluster.contains(op),
            "{op} not in the kernel's cluster:\n{cluster}"
        );
    }
    assert!(
        text.contains("ifelse: then") && text.contains("ifelse: else"),
        "{text}"
    );
    assert!(text.contains("scan: body"), "{text}");
    // Every edge comes after every node, so no edge pulls a node into a cluster.
    let first_edge = text.find(" -> ").unwrap();
    assert!(!text[first_edge..].contains("subgraph"), "{text}");
    for k in 0..3 {
        assert!(
            text.contains(&format!("out{k} [shape=doubleoctagon")),
            "{text}"
        );
    }
    if let Some(svg) = svg(&text) {
        assert!(svg.contains("<svg") && svg.contains("one kernel"), "{svg}");
    }
}

#[test]
fn kiln_dump_dot_writes_the_compiled_function() {
    let dir = std::env::temp_dir().join(format!("kiln-dot-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = kiln::CompileOptions {
        name: "f".into(),
        dump: kiln::dump::DumpOptions {
            stages: vec!["dot".into()],
            dir: Some(dir.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let f = kiln::compile_func(parse_one("f.kir", SRC).unwrap(), &options).unwrap();
    let nn = kiln::dump::STAGES.iter().position(|s| *s == "dot").unwrap();
    let text = std::fs::read_to_string(dir.join(format!("f.{nn:02}.dot.txt"))).unwrap();
    assert_eq!(text, func_to_dot(f.func()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kiln_opt_dot_prints_the_optimized_function_drawn() {
    let dir = std::env::temp_dir().join(format!("kiln-dot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.kir");
    std::fs::write(&file, SRC).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["opt", "--dot"])
        .arg(&file)
        .env_remove("KILN_DUMP")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), optimized_dot());
}
