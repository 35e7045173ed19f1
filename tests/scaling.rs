//! Costs that must grow near-linearly with the program: each test builds a program of size n
//! and of size 4n and requires the larger to cost less than 7 times the smaller (linear is 4;
//! the costs these tests guard against were quadratic or cubic and cost 10 to 60 times as
//! much at these sizes). Times are the median of three runs; memory is the peak of a child
//! process that does only that work.

use kiln::{function, Graph};
use ndarray::arr1;
use std::time::Instant;

const GROWTH: f64 = 7.0;

/// The median of three timings of `f(n)`, in seconds.
fn seconds(n: usize, f: &dyn Fn(usize)) -> f64 {
    let mut t: Vec<f64> = (0..3)
        .map(|_| {
            let s = Instant::now();
            f(n);
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[1]
}

/// Held while a test measures: the tests of this file run one at a time, so that one's work
/// does not slow the other's timings.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn grows_linearly(what: &str, n: usize, f: &dyn Fn(usize)) {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (small, large) = (seconds(n, f), seconds(4 * n, f));
    let ratio = large / small;
    eprintln!("{what}: n={n} {small:.3} s, 4n {large:.3} s, ratio {ratio:.1}");
    assert!(
        ratio < GROWTH,
        "{what}: 4x the size cost {ratio:.1}x the time"
    );
}

#[test]
fn a_chain_of_ifelse_compiles_in_linear_time() {
    grows_linearly("ifelse chain", 500, &|n| {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(4)]);
        let c = g.input("c", kiln::bool, []);
        let mut y = x.clone();
        for _ in 0..n {
            let (a, b) = (y.clone(), y.clone());
            y = kiln::ifelse(&c, move || vec![&a + 1.0], move || vec![&b * 2.0]).remove(0);
        }
        function(&[&x, &c], &[&y]).compile().unwrap();
    });
}

#[test]
fn a_long_row_group_is_planned_in_linear_time() {
    // A softmax-like chain over the rows of x: every step a map or a reduction that keeps
    // the rows, so lowering gathers all of them into one row group.
    let program = |n: usize| {
        let mut src = String::from("func @f(%x: f32[4, 8]) -> (f32[4, 8]) {\n  %p0 = exp %x\n");
        for i in 1..n {
            src.push_str(&format!(
                "  %s{i} = sum %p{} {{axes = [1], keepdims = true}}\n  %p{i} = sub %p{}, %s{i}\n",
                i - 1,
                i - 1
            ));
        }
        src.push_str(&format!("  return %p{}\n}}\n", n - 1));
        kiln::ir::text::parse("rows", &src).unwrap().remove(0)
    };
    let (small, large) = (program(2500), program(10_000));
    let lower = |f: &kiln::ir::Func| {
        let options = kiln::lower::LowerOptions {
            row_groups: true,
            ..Default::default()
        };
        kiln::lower::lower_with(f, options)
    };
    let groups = lower(&large).to_string();
    assert!(
        groups.contains("rows"),
        "one row group:\n{}",
        &groups[..500]
    );
    grows_linearly("row group", 2500, &|n| {
        let f = if n == 2500 { &small } else { &large };
        std::hint::black_box(lower(f));
    });
}

#[test]
fn state_and_saved_functions_of_many_variables_load_in_linear_time() {
    let dir = std::env::temp_dir().join(format!("kiln-scaling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = |n: usize| {
        let g = Graph::new();
        let x = g.input("x", kiln::f32, [Some(1)]);
        let mut b = function(&[&x], &[&x]);
        for i in 0..n {
            let v = g.shared(&format!("v{i}"), arr1(&[i as f32]).into_dyn());
            b = b.update(&v, &v + &x);
        }
        let f = b.compile().unwrap();
        let (state, kfn) = (dir.join(format!("{n}.npz")), dir.join(format!("{n}.kfn")));
        f.save_state(&state).unwrap();
        f.save(&kfn).unwrap();
        (f, state, kfn)
    };
    let (small, large) = (saved(500), saved(2000));
    let pick = |n: usize| if n == 500 { &small } else { &large };
    grows_linearly("load_state", 500, &|n| {
        let (f, state, _) = pick(n);
        f.load_state(state).unwrap();
    });
    grows_linearly("Function::load", 500, &|n| {
        let (_, _, kfn) = pick(n);
        assert!(kiln::Function::load(kfn, &Default::default()).is_ok());
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child's side of [`fusing_a_long_chain_takes_memory_linear_in_it`]: with
/// `KILN_SCALING_CHAIN=n`, fuses a chain of n elementwise ops and prints its peak memory.
#[test]
fn fuse_a_chain_in_this_process() {
    let Some(n) = std::env::var("KILN_SCALING_CHAIN")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let mut src = String::from("func @f(%x: f32[8], %y: f32[8]) -> (f32[8]) {\n  %v0 = exp %x\n");
    for i in 1..n {
        let op = ["mul", "add", "sub", "maximum"][i % 4];
        src.push_str(&format!("  %v{i} = {op} %v{}, %y\n", i - 1));
    }
    src.push_str(&format!("  return %v{}\n}}\n", n - 1));
    let func = kiln::ir::text::parse("chain", &src).unwrap().remove(0);
    drop(src);
    let fused = kiln::rewrite::fuse(func);
    assert!(fused.body.len() < n / 100, "the chain fused");
    println!("peak-kb {}", peak_kb());
}

/// This process's peak resident memory (Linux's VmHWM), in KB.
fn peak_kb() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn fusing_a_long_chain_takes_memory_linear_in_it() {
    if !std::path::Path::new("/proc/self/status").exists() {
        return;
    }
    let peak = |n: usize| -> usize {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "fuse_a_chain_in_this_process", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("KILN_SCALING_CHAIN", n.to_string())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.split("peak-kb ").nth(1));
        line.unwrap_or_else(|| panic!("{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    let (small, large) = {
        let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
        (peak(20_000), peak(80_000))
    };
    let per_inst = (large - small) as f64 * 1024.0 / 60_000.0;
    eprintln!("fusing a chain: {small} KB at 20k ops, {large} KB at 80k: {per_inst:.0} B per op");
    // Each op's text, instruction and value take a few hundred bytes; every prefix of the
    // fused program kept took 10 KB per op.
    assert!(per_inst < 2000.0, "{per_inst:.0} bytes per op");
}
