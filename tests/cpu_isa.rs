//! `KILN_CPU_ISA` picks the products' kernels and the width of the kernels' math buffer
//! functions (`avx2`, `avx512`; unset or `auto`: the widest the CPU runs): every choice gives
//! the same bits, the kernels dump names it, and a value
//! that names no ISA, or one the CPU lacks, is a compile error naming the variable. The choice
//! is made once per process, so each case runs this test binary again as a child with the
//! variable set (the ignored `child` test).

#![cfg(target_arch = "x86_64")]

use kiln::dump::DumpOptions;
use kiln::gemm::Isa;
use kiln::{function, Backend, CompileOptions, Graph, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::process::Command;

/// The child's output (stdout, then stderr) with `KILN_CPU_ISA` set to `value`; it checks
/// what it can itself (see `child`) and fails where that fails.
fn run_child(value: &str) -> String {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["child", "--exact", "--ignored", "--nocapture"])
        .env("KILN_CPU_ISA", value)
        .env("KILN_TEST_CHILD", "1")
        .env_remove("KILN_DUMP")
        .output()
        .expect("the test binary runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "KILN_CPU_ISA={value}: {text}");
    text
}

/// The value after `key ` on a line of the child's output.
fn field<'t>(text: &'t str, key: &str) -> &'t str {
    (text.lines())
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no `{key}` in the child's output:\n{text}"))
}

#[test]
fn every_isa_gives_the_same_bits_and_the_dump_names_it() {
    let widest = Isa::ALL
        .into_iter()
        .rev()
        .find(|i| i.available())
        .filter(|_| kiln::gemm::available());
    let Some(widest) = widest else {
        eprintln!("skipped: this host runs none of kiln's GEMM kernels");
        return;
    };
    let auto = run_child("auto");
    assert_eq!(field(&auto, "isa"), widest.name(), "{auto}");
    for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
        let text = run_child(isa.name());
        assert_eq!(field(&text, "isa"), isa.name(), "{text}");
        assert_eq!(field(&text, "bits"), field(&auto, "bits"), "{text}");
        assert!(
            field(&text, "dump").contains(&format!("gemm, {} kernels", isa.name())),
            "{text}"
        );
        if !host_math_off() {
            assert!(
                field(&text, "math").contains(&format!("{} buffer functions", isa.name())),
                "{text}"
            );
        }
    }
}

/// Whether `KILN_CPU_HOST_MATH` turns the buffer functions off (then no kernel calls them).
fn host_math_off() -> bool {
    matches!(
        std::env::var("KILN_CPU_HOST_MATH").as_deref(),
        Ok("0") | Ok("off") | Ok("false")
    )
}

#[test]
fn a_kiln_cpu_isa_that_names_no_isa_this_cpu_runs_is_a_compile_error_naming_it() {
    let mut bad = vec!["avx3", "AVX2 "];
    if !Isa::Avx512.available() {
        bad.push("avx512");
    }
    for value in bad {
        let text = run_child(value);
        assert!(
            field(&text, "error").contains("KILN_CPU_ISA="),
            "KILN_CPU_ISA={value}: {text}"
        );
    }
}

/// In the child: compiles a product deep enough for several k chunks, with a softmax and a
/// tanh of it (math the buffer functions compute, rows of a length no vector width divides),
/// and prints the ISA products use (`isa`), the outputs' bits (`bits`), and the kernels dump's
/// products and math lines (`dump`, `math`); where compiling fails, the error (`error`).
#[test]
#[ignore = "run by the tests above, in a process of its own"]
fn child() {
    if std::env::var("KILN_TEST_CHILD").is_err() {
        eprintln!("skipped: run by the tests above, with the variables they set");
        return;
    }
    let (m, k, n): (usize, usize, usize) = (50, 600, 70);
    let g = Graph::new();
    let a = g.input("a", kiln::f32, [Some(m as i64), Some(k as i64)]);
    let b = g.input("b", kiln::f32, [Some(k as i64), Some(n as i64)]);
    let c = a.matmul(&b);
    let z = &c * 0.05;
    let e = (&z - z.max(Some(&[1]), true)).exp();
    let softmax = &e / e.sum(Some(&[1]), true);
    let t = (&z + 0.25).tanh();
    let dir = std::env::temp_dir().join(format!("kiln-cpu-isa-{}", std::process::id()));
    let options = CompileOptions {
        name: "product".into(),
        backend: Some(Backend::Cpu),
        dump: DumpOptions {
            stages: vec!["kernels".into()],
            dir: Some(dir.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let f = match function(&[&a, &b], &[&c, &softmax, &t])
        .options(options)
        .compile()
    {
        Ok(f) => f,
        Err(e) => {
            println!("error {e}");
            return;
        }
    };
    println!("isa {}", kiln::gemm::isa().name());
    let values = |rows: usize, cols: usize, seed: usize| {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[rows, cols]), |i| {
            ((i[0] * 31 + i[1] * 7 + seed) % 17) as f32 * 0.37 - 2.9
        }))
    };
    let (x, y) = (values(m, k, 1), values(k, n, 2));
    let outs = f.call(&[x.view(), y.view()]).unwrap();
    // FNV-1a over the bits of every output: equal bits, equal text.
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for out in outs {
        let Tensor::F32(out) = out else {
            panic!("the outputs are f32")
        };
        for v in out.iter() {
            hash = (hash ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01b3);
        }
    }
    println!("bits {hash:016x}");
    let kernels = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().contains("kernels"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap_or_default();
    let line = (kernels.lines())
        .find(|l| l.starts_with("products"))
        .unwrap_or("none");
    println!("dump {line}");
    let math = (kernels.lines())
        .find(|l| l.starts_with("math of"))
        .unwrap_or("none");
    println!("math {math}");
    let _ = std::fs::remove_dir_all(&dir);
}
