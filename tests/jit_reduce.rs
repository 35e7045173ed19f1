//! Generated reductions in the CPU backend against the interpreter: every reduce op, dtype and
//! set of axes on shapes known only at call time (size-0 and size-1 dims included), transposed
//! and broadcast inputs, keepdims, NaN and infinities, long sums, and fused prologues.

use kiln::ir::text::parse;
use kiln::{Backend, CompileOptions, Tensor};
use ndarray::{ArrayD, IxDyn};

const OPS: [&str; 9] = [
    "sum", "prod", "max", "min", "mean", "all", "any", "argmax", "argmin",
];
const DTYPES: [&str; 5] = ["f32", "f64", "i32", "i64", "bool"];

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tensor of `dtype` and `shape`; with `specials`, floats include NaN, infinities and -0.
fn tensor(dtype: &str, shape: &[usize], rng: &mut Rng, specials: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let sh = IxDyn(shape);
    let mut float = || {
        let u = rng.unit();
        if specials && u < 0.04 {
            [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0][(u * 100.0) as usize % 4]
        } else {
            // Products of a few hundred of these stay finite in f32.
            (rng.unit() - 0.5) * 2.2
        }
    };
    match dtype {
        "f32" => Tensor::F32(ArrayD::from_shape_fn(sh, |_| float() as f32)),
        "f64" => Tensor::F64(ArrayD::from_shape_fn(sh, |_| float())),
        "i32" => Tensor::I32(ArrayD::from_shape_fn(sh, |_| (rng.next() % 11) as i32 - 5)),
        "i64" => Tensor::I64(ArrayD::from_shape_fn(sh, |_| {
            (rng.next() % 1_000_003) as i64 - 500_000
        })),
        _ => Tensor::Bool(ArrayD::from_shape_fn(sh, |_| n == 0 || rng.next() % 8 != 0)),
    }
}

fn options(backend: Backend) -> CompileOptions {
    CompileOptions {
        backend: Some(backend),
        ..Default::default()
    }
}

/// Runs `src` on both backends: both fail, or both give results of one shape and dtype.
fn both(src: &str, inputs: &[&Tensor]) -> Option<(Tensor, Tensor)> {
    both_many(src, &[inputs.to_vec()]).remove(0)
}

/// `both` for several sets of inputs, compiling once.
fn both_many(src: &str, cases: &[Vec<&Tensor>]) -> Vec<Option<(Tensor, Tensor)>> {
    let f = parse("t", src)
        .unwrap_or_else(|e| panic!("{e:?}\n{src}"))
        .remove(0);
    let compiled: Vec<_> = [Backend::Interp, Backend::Cpu]
        .into_iter()
        .map(|backend| kiln::compile_func(f.clone(), &options(backend)).unwrap())
        .collect();
    cases
        .iter()
        .map(|inputs| {
            let views: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            let a = compiled[0].call(&views).map(|mut v| v.remove(0));
            let b = compiled[1].call(&views).map(|mut v| v.remove(0));
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.shape(), b.shape(), "{src}");
                    assert_eq!(a.dtype(), b.dtype(), "{src}");
                    Some((a, b))
                }
                (Err(_), Err(_)) => None,
                (a, b) => panic!("one backend failed:\n{src}\ninterp: {a:?}\ncpu: {b:?}"),
            }
        })
        .collect()
}

/// Floats within `rel` of each other (relative to the larger magnitude, or absolutely near 0),
/// NaN where the other is NaN; everything else exact.
fn assert_close(a: &Tensor, b: &Tensor, rel: f64, what: &str) {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    for (k, (&p, &q)) in x.iter().zip(&y).enumerate() {
        let ok = (p.is_nan() && q.is_nan())
            || p == q
            || (rel > 0.0 && (p - q).abs() <= rel * p.abs().max(q.abs()).max(1e-30));
        assert!(ok, "{what}: element {k}: interp {p} vs cpu {q}");
    }
}

/// The text of a reduction's result type, for an input of `dtype` with `dims`.
fn rtype(op: &str, dtype: &str, dims: &[&str], axes: &[usize], keepdims: bool) -> String {
    let dt = match (op, dtype) {
        ("sum" | "prod", "bool") => "i64",
        ("mean", "i32" | "i64" | "bool") => "f64",
        ("argmax" | "argmin", _) => "i64",
        ("all" | "any", _) => "bool",
        _ => dtype,
    };
    let kept: Vec<&str> = dims
        .iter()
        .enumerate()
        .filter_map(|(a, &d)| {
            if !axes.contains(&a) {
                Some(d)
            } else if keepdims {
                Some("1")
            } else {
                None
            }
        })
        .collect();
    format!("{dt}[{}]", kept.join(", "))
}

fn shape_text(rank: usize) -> String {
    vec!["?"; rank].join(", ")
}

fn axes_subsets(rank: usize) -> Vec<Vec<usize>> {
    (0..1u32 << rank)
        .map(|m| (0..rank).filter(|&a| m >> a & 1 == 1).collect())
        .collect()
}

fn shapes(rank: usize) -> Vec<Vec<usize>> {
    match rank {
        1 => vec![vec![0], vec![1], vec![7], vec![8], vec![300], vec![1029]],
        2 => vec![
            vec![3, 5],
            vec![1, 9],
            vec![0, 4],
            vec![4, 0],
            vec![17, 130],
            vec![9, 2],
        ],
        3 => vec![
            vec![2, 3, 4],
            vec![4, 1, 37],
            vec![3, 0, 2],
            vec![5, 9, 131],
        ],
        _ => vec![
            vec![2, 3, 4, 5],
            vec![1, 6, 1, 9],
            vec![3, 2, 0, 2],
            vec![2, 5, 3, 17],
        ],
    }
}

/// Tolerance: sums and means reproduce the reference's order (exact); float products run in
/// eight partial products rather than one, a few ulps per factor apart.
fn tolerance(op: &str, dtype: &str) -> f64 {
    match (op, dtype) {
        ("prod", "f32") => 1e-4,
        ("prod", "f64") => 1e-12,
        _ => 0.0,
    }
}

#[test]
fn every_reduce_op_dtype_and_axes_agrees_with_the_interpreter() {
    let before = kiln::jit_cpu::generated_reduce_calls();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut checked = 0;
    for rank in 1..=4 {
        for axes in axes_subsets(rank) {
            for keepdims in [false, true] {
                // Every keepdims at low rank; one at rank 3, and a sample of rank 4's axes
                // (compiling in a debug build takes most of the time).
                if rank >= 3 && keepdims != (axes.len() % 2 == 0) {
                    continue;
                }
                if rank == 4
                    && ![
                        vec![],
                        vec![0],
                        vec![3],
                        vec![1, 2],
                        vec![0, 3],
                        vec![0, 1, 2, 3],
                        vec![0, 2, 3],
                    ]
                    .contains(&axes)
                {
                    continue;
                }
                for op in OPS {
                    if op.starts_with("arg") && axes.len() != 1 {
                        continue;
                    }
                    for dtype in DTYPES {
                        let rt = rtype(op, dtype, &vec!["?"; rank], &axes, keepdims);
                        let src = format!(
                            "func @f(%x: {dtype}[{}]) -> ({rt}) {{\n  %y = {op} %x {{axes = {axes:?}, keepdims = {keepdims}}}\n  return %y\n}}\n",
                            shape_text(rank)
                        );
                        let xs: Vec<Tensor> = shapes(rank)
                            .iter()
                            .map(|shape| {
                                let specials = rng.next() % 2 == 0;
                                tensor(dtype, shape, &mut rng, specials)
                            })
                            .collect();
                        let cases: Vec<Vec<&Tensor>> = xs.iter().map(|x| vec![x]).collect();
                        for (x, r) in xs.iter().zip(both_many(&src, &cases)) {
                            if let Some((a, b)) = r {
                                let what = format!("{src} on {:?}", x.shape());
                                assert_close(&a, &b, tolerance(op, dtype), &what);
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 4000, "only {checked} cases ran");
    assert!(
        kiln::jit_cpu::generated_reduce_calls() > before + 3000,
        "the reductions did not run as generated code"
    );
}

#[test]
fn transposed_and_broadcast_inputs() {
    let mut rng = Rng(77);
    for dtype in ["f32", "f64", "i32", "i64"] {
        for op in ["sum", "mean", "max", "min", "prod", "any"] {
            for axes in axes_subsets(3) {
                // A transposed view (strides not in order) and a broadcast one (stride 0).
                let ry = rtype(op, dtype, &["?", "?", "?"], &axes, false);
                let rz = rtype(op, dtype, &["4", "6", "9"], &axes, true);
                let src = format!(
                    "func @f(%x: {dtype}[?, ?, ?], %r: {dtype}[?, 1, ?]) -> ({ry}, {rz}) {{\n  %t = transpose %x {{perm = [2, 0, 1]}}\n  %y = {op} %t {{axes = {axes:?}}}\n  %b = broadcast_to %r {{shape = [4, 6, 9]}}\n  %z = {op} %b {{axes = {axes:?}, keepdims = true}}\n  return %y, %z\n}}\n"
                );
                let x = tensor(dtype, &[6, 9, 4], &mut rng, false);
                let r = tensor(dtype, &[4, 1, 9], &mut rng, false);
                let f = parse("t", &src).unwrap().remove(0);
                let mut outs = Vec::new();
                for backend in [Backend::Interp, Backend::Cpu] {
                    let c = kiln::compile_func(f.clone(), &options(backend)).unwrap();
                    outs.push(c.call(&[x.view(), r.view()]).unwrap());
                }
                for (a, b) in outs[0].iter().zip(&outs[1]) {
                    assert_close(a, b, tolerance(op, dtype), &src);
                }
            }
        }
    }
}

#[test]
fn empty_max_is_an_error_on_both_backends() {
    let src = "func @f(%x: f32[?, ?]) -> (f32[?]) {\n  %y = max %x {axes = [1]}\n  return %y\n}\n";
    let x = Tensor::F32(ArrayD::zeros(IxDyn(&[3, 0])));
    assert!(both(src, &[&x]).is_none());
    // The same op over a non-empty axis of an empty array is an empty result.
    let x = Tensor::F32(ArrayD::zeros(IxDyn(&[0, 3])));
    let (a, b) = both(src, &[&x]).unwrap();
    assert_eq!(a.shape(), &[0]);
    assert_eq!(b.shape(), &[0]);
}

/// Sums of a million elements: the reference's pairwise order, so the same bits, and an error
/// far below a naive loop's.
#[test]
fn long_sums_are_pairwise() {
    let n = 1_000_000;
    let mut rng = Rng(5);
    let xs: Vec<f32> = (0..n).map(|_| rng.unit() as f32).collect();
    let exact: f64 = xs.iter().map(|&x| x as f64).sum();
    let x = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n]), xs.clone()).unwrap());
    let src = "func @f(%x: f32[?]) -> (f32[]) {\n  %y = sum %x {axes = [0]}\n  return %y\n}\n";
    let (a, b) = both(src, &[&x]).unwrap();
    assert!(a.bit_eq(&b), "{a:?} vs {b:?}");
    let got = b.to_f64_vec()[0];
    // Pairwise: about eps * log2(n) relative; a naive f32 loop is off by ~1e-3 here.
    assert!(((got - exact) / exact).abs() < 1e-5, "{got} vs {exact}");
    // Down a column: the same along axis 0 of a [n / 4, 4] matrix, and across rows.
    let m = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n / 4, 4]), xs).unwrap());
    for axis in [0, 1] {
        let src = format!(
            "func @f(%x: f32[?, ?]) -> (f32[?]) {{\n  %y = sum %x {{axes = [{axis}]}}\n  return %y\n}}\n"
        );
        let (a, b) = both(&src, &[&m]).unwrap();
        assert!(a.bit_eq(&b), "axis {axis}");
    }
}

/// Fused prologues: the softmax denominator and logsumexp (`sum(exp(x - m))` with `m` a
/// broadcast column), over the last axis and over axis 0, and a prologue with a cast to bool.
#[test]
fn fused_prologues_agree_with_the_interpreter() {
    let before = kiln::jit_cpu::generated_reduce_calls();
    let mut rng = Rng(99);
    for dtype in ["f32", "f64"] {
        for (axis, mshape) in [(1, "[?, 1]"), (0, "[1, ?]")] {
            for op in ["sum", "max", "mean", "prod", "min"] {
                let rt = rtype(op, dtype, &["?", "?"], &[axis], true);
                let src = format!(
                    "func @f(%x: {dtype}[?, ?], %m: {dtype}{mshape}) -> ({rt}) {{\n  %s = fused_reduce \"{op}\" %x, %m {{axes = [{axis}], keepdims = true, program = \"%0 = input 0 : {dtype}; %1 = input 1 : {dtype}; %2 = sub %0, %1 : {dtype}; %3 = exp %2 : {dtype}; return %3\"}}\n  return %s\n}}\n"
                );
                for shape in [[3usize, 5], [64, 300], [300, 37], [1, 1]] {
                    let x = tensor(dtype, &shape, &mut rng, false);
                    let ms = if axis == 1 {
                        [shape[0], 1]
                    } else {
                        [1, shape[1]]
                    };
                    let m = tensor(dtype, &ms, &mut rng, false);
                    let (a, b) = both(&src, &[&x, &m]).unwrap();
                    // exp is a polynomial here and the C library there: a few ulps per element.
                    let rel = if dtype == "f32" { 1e-5 } else { 1e-13 };
                    let rel = if op == "prod" { rel * 100.0 } else { rel };
                    assert_close(&a, &b, rel, &format!("{src} on {shape:?}"));
                }
            }
        }
    }
    // any/all of a comparison, and a count of true values.
    for op in ["any", "all", "sum"] {
        let rt = rtype(op, "bool", &["?", "?", "?"], &[0, 2], false);
        let src = format!(
            "func @f(%x: f32[?, ?, ?]) -> ({rt}) {{\n  %s = fused_reduce \"{op}\" %x {{axes = [0, 2], program = \"%0 = input 0 : f32; %1 = const 0.5 : f32; %2 = gt %0, %1 : bool; return %2\"}}\n  return %s\n}}\n"
        );
        let x = tensor("f32", &[5, 7, 33], &mut rng, true);
        let (a, b) = both(&src, &[&x]).unwrap();
        assert_close(&a, &b, 0.0, &src);
    }
    assert!(kiln::jit_cpu::generated_reduce_calls() > before);
}

/// The kernels dump names the generated reductions.
#[test]
fn the_kernels_dump_shows_generated_reductions() {
    let dir = std::env::temp_dir().join(format!("kiln-jit-reduce-{}", std::process::id()));
    let opts = CompileOptions {
        name: "r".into(),
        dump: kiln::dump::DumpOptions {
            stages: vec!["kernels".into()],
            dir: Some(dir.clone()),
        },
        backend: Some(Backend::Cpu),
        ..Default::default()
    };
    let src = "func @r(%x: f32[?, ?]) -> (f32[?], f32[?]) {\n  %a = sum %x {axes = [0]}\n  %b = max %x {axes = [1]}\n  return %a, %b\n}\n";
    let f = parse("t", src).unwrap().remove(0);
    kiln::compile_func(f, &opts).unwrap();
    let text = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        text.contains("reduce sum over axes [0] (generated, 4 lanes)"),
        "{text}"
    );
    assert!(
        text.contains("reduce max over axes [1] (generated"),
        "{text}"
    );
}
