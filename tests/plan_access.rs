//! The plan decides how each map and reduce step reads its operands (`lower::access`): the
//! index space, and per operand the axis walking each index axis or a broadcast. The schedule
//! dump shows it, and the CPU backend's kernels follow it, so the values are the
//! interpreter's, including the broadcasts the CPU backend once read wrongly (`f32[3, 1]`
//! against `f32[2, 3, 4]`) and `?` dims, which never broadcast.

use kiln::{compile_func, Backend, CompileOptions, Tensor, TensorRef};
use ndarray::{ArrayD, IxDyn};

fn parse(src: &str) -> kiln::ir::Func {
    kiln::ir::text::parse("plan_access.kir", src)
        .unwrap()
        .remove(0)
}

fn schedule(src: &str) -> String {
    kiln::lower::lower(&parse(src)).to_string()
}

fn values(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| kiln::random::normal_f32(seed, i))
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

fn run(src: &str, backend: Backend, inputs: &[ArrayD<f32>]) -> Vec<Tensor> {
    let opts = CompileOptions {
        backend: Some(backend),
        ..CompileOptions::default()
    };
    let f = compile_func(parse(src), &opts).unwrap();
    let refs: Vec<TensorRef> = inputs.iter().map(|a| TensorRef::from(a.view())).collect();
    f.call(&refs).unwrap()
}

const LEADING_AND_LAST: &str =
    "func @f(%x: f32[2, 3, 4], %b: f32[3, 1], %c: f32[1, 3, 1]) -> (f32[2, 3, 4], f32[2, 3]) {
  %y = add %x, %b
  %z = mul %y, %c
  %s = sum %z {axes = [2]}
  return %z, %s
}";

#[test]
fn the_schedule_shows_each_operands_access_and_the_reductions_data() {
    let s = schedule(LEADING_AND_LAST);
    assert!(
        s.contains("= map add %0, %1 {") && s.contains("over [2, 3, 4] reads (0, 1, 2), (_, 0, _)"),
        "{s}"
    );
    assert!(s.contains("reads (0, 1, 2), (_, 1, _)"), "{s}");
    assert!(
        s.contains("reduce sum axes [2]")
            && s.contains("acc f32 from 0 pairwise 128x8")
            && s.contains("over [2, 3, 4] reads (0, 1, 2) acc"),
        "{s}"
    );
    let max = schedule(
        "func @m(%x: i32[?, 5]) -> (i32[?]) {\n  %m = max %x {axes = [1]}\n  return %m\n}",
    );
    assert!(
        max.contains("over [?, 5] reads (0, 1) acc i32 from -2147483648"),
        "{max}"
    );
}

#[test]
fn unknown_dims_are_read_along_their_axis_never_broadcast() {
    let s = schedule("func @u(%x: f32[?, 4], %r: f32[?]) -> (f32[?, 4]) {\n  %e = expand_dims %r {axes = [1]}\n  %y = add %x, %e\n  return %y\n}");
    assert!(s.contains("over [?, 4] reads (0, 1), (0, _)"), "{s}");
}

#[test]
fn the_cpu_backend_follows_the_plan_to_the_interpreters_bits() {
    let inputs = [
        values(&[2, 3, 4], 1),
        values(&[3, 1], 2),
        values(&[1, 3, 1], 3),
    ];
    let want = run(LEADING_AND_LAST, Backend::Interp, &inputs);
    let got = run(LEADING_AND_LAST, Backend::Cpu, &inputs);
    assert_eq!(got, want);
    // The same with the leading dim unknown.
    let unknown = LEADING_AND_LAST.replace("%x: f32[2, 3, 4]", "%x: f32[?, 3, 4]");
    let unknown = unknown.replace(
        "-> (f32[2, 3, 4], f32[2, 3])",
        "-> (f32[?, 3, 4], f32[?, 3])",
    );
    let want = run(&unknown, Backend::Interp, &inputs);
    assert_eq!(run(&unknown, Backend::Cpu, &inputs), want);
}
