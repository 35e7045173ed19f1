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
        _ => Tensor::Bool(ArrayD::from_shape_fn(sh, |_| {
            n == 0 || !rng.next().is_multiple_of(8)
        })),
    }
}

fn options(backend: Backend) -> CompileOptions {
    CompileOptions {
        backend: Some(backend),
        ..Default::default()
    }
}

/// The function in `src`, compiled for `backend`.
fn compile(src: &str, backend: Backend) -> kiln::Function {
    let f = parse("t", src)
        .unwrap_or_else(|e| panic!("{e:?}\n{src}"))
        .remove(0);
    kiln::compile_func(f, &options(backend)).unwrap()
}

/// Runs `src` on both backends: both fail, or both give results of one shape and dtype.
fn both(src: &str, inputs: &[&Tensor]) -> Option<(Tensor, Tensor)> {
    both_many(src, &[inputs.to_vec()]).remove(0)
}

/// `both` for several sets of inputs, compiling once.
fn both_many(src: &str, cases: &[Vec<&Tensor>]) -> Vec<Option<(Tensor, Tensor)>> {
    let compiled: Vec<_> = [Backend::Interp, Backend::Cpu]
        .into_iter()
        .map(|backend| compile(src, backend))
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
                                let specials = rng.next().is_multiple_of(2);
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
            ..Default::default()
        },
        backend: Some(Backend::Cpu),
        ..Default::default()
    };
    let src = "func @r(%x: f32[?, ?]) -> (f32[?], f32[?], i64[?]) {\n  %a = sum %x {axes = [0]}\n  %b = max %x {axes = [1]}\n  %c = argmin %x {axes = [1]}\n  return %a, %b, %c\n}\n";
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
    assert!(
        text.contains("reduce argmin over axes [1] (generated, 4 lanes)"),
        "{text}"
    );
}

/// Compiles `src` for both backends and calls each on `inputs` (views of any layout): returns
/// both results and how many generated reductions the CPU call ran (on this thread).
fn call_both(src: &str, inputs: &[kiln::TensorRef]) -> (Vec<Tensor>, Vec<Tensor>, usize) {
    let interp = compile(src, Backend::Interp);
    let cpu = compile(src, Backend::Cpu);
    let a = interp.call(inputs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let before = kiln::jit_cpu::generated_reduce_calls_on_this_thread();
    let b = cpu.call(inputs).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let ran = kiln::jit_cpu::generated_reduce_calls_on_this_thread() - before;
    (a, b, ran)
}

/// Equal bit for bit (any NaN matches any NaN: the reference's max returns its own NaN).
fn assert_same_bits(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.dtype(), b.dtype(), "{what}");
    assert_eq!(a.shape(), b.shape(), "{what}");
    for (k, (p, q)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        let same = p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
        assert!(same, "{what}: element {k}: interp {p:?} vs cpu {q:?}");
    }
}

/// The index argmax (`max`) or argmin should give: the first NaN, else the first element that
/// compares equal to the extreme. Written from the reference's documented rule, not its code.
fn expected_arg(xs: &[f64], max: bool) -> i64 {
    if let Some(i) = xs.iter().position(|x| x.is_nan()) {
        return i as i64;
    }
    let ext = xs.iter().copied().fold(xs[0], |a, x| {
        if (max && x > a) || (!max && x < a) {
            x
        } else {
            a
        }
    });
    xs.iter().position(|&x| x == ext).unwrap() as i64
}

/// Rows with ties, NaNs (first, middle, last, several), -0.0 next to 0.0, infinities and rows
/// of one value, each at lengths around the vector leaves' eight-element blocks.
fn special_rows(len: usize) -> Vec<Vec<f64>> {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let base: Vec<f64> = (0..len).map(|i| ((i * 7) % 5) as f64 - 2.0).collect();
    let mut rows = vec![base.clone()];
    let with = |at: &[(usize, f64)]| {
        let mut r = base.clone();
        for &(i, v) in at {
            if i < r.len() {
                r[i] = v;
            }
        }
        r
    };
    let last = len - 1;
    // NaN first, middle, last, and two NaNs.
    rows.push(with(&[(0, nan)]));
    rows.push(with(&[(len / 2, nan)]));
    rows.push(with(&[(last, nan)]));
    rows.push(with(&[(last, nan), (len / 3, nan)]));
    // Ties of the extreme in different lanes (the max of `base` is 2.0, the min -2.0).
    rows.push(with(&[(last, 9.0), (1, 9.0)]));
    rows.push(with(&[(last, -9.0), (len / 2, -9.0), (len / 3 + 1, -9.0)]));
    // -0.0 and 0.0 as the extremes, in both orders.
    rows.push(
        (0..len)
            .map(|i| if i % 3 == 1 { -0.0 } else { -1.0 })
            .collect(),
    );
    rows.push(
        (0..len)
            .map(|i| match i % 3 {
                1 => 0.0,
                2 => -0.0,
                _ => -1.0,
            })
            .collect(),
    );
    rows.push(
        (0..len)
            .map(|i| match i % 4 {
                3 => -0.0,
                1 => 0.0,
                _ => 1.0,
            })
            .collect(),
    );
    // Infinities: all of one sign, mixed, and next to NaN.
    rows.push(vec![-inf; len]);
    rows.push(vec![inf; len]);
    rows.push(with(&[(last, inf), (len / 2, -inf), (0, -inf)]));
    rows.push(with(&[(len / 2, inf), (last, nan)]));
    // One value everywhere.
    rows.push(vec![0.25; len]);
    rows
}

/// `rows` (of equal length) as a matrix of dtype `dtype` (`f32` or `f64`).
fn rows_tensor(dtype: &str, rows: &[Vec<f64>]) -> Tensor {
    let flat: Vec<f64> = rows.concat();
    let shape = [rows.len(), rows.first().map_or(0, Vec::len)];
    match dtype {
        "f32" => Tensor::F32(
            ArrayD::from_shape_vec(IxDyn(&shape), flat.iter().map(|&v| v as f32).collect())
                .unwrap(),
        ),
        _ => Tensor::F64(ArrayD::from_shape_vec(IxDyn(&shape), flat).unwrap()),
    }
}

/// Argmax and argmin of floats against the interpreter and the rule itself, over rows (lanes
/// along the reduced axis), columns (a vector of outputs per lane), a strided column and the
/// whole array (no axis: the flat index), every call in generated code.
#[test]
fn argmax_and_argmin_of_floats_follow_the_reference_on_ties_and_nan() {
    for dtype in ["f32", "f64"] {
        for op in ["argmax", "argmin"] {
            let max = op == "argmax";
            let src = format!(
                "func @f(%x: {dtype}[?, ?]) -> (i64[?], i64[?], i64[?, 1], i64[]) {{\n  %r = {op} %x {{axes = [1]}}\n  %t = transpose %x {{perm = [1, 0]}}\n  %c = {op} %t {{axes = [0]}}\n  %k = {op} %x {{axes = [1], keepdims = true}}\n  %a = {op} %x\n  return %r, %c, %k, %a\n}}\n"
            );
            for len in [1, 2, 7, 8, 9, 15, 16, 17, 33, 130] {
                let rows = special_rows(len);
                let flat: Vec<f64> = rows.concat();
                let x = rows_tensor(dtype, &rows);
                // The rows as columns too: the same rule down axis 0 of the transpose.
                let (a, b, ran) = call_both(&src, &[x.view()]);
                assert_eq!(ran, 4, "{src}: not every argmax ran generated code");
                for (p, q) in a.iter().zip(&b) {
                    assert_same_bits(p, q, &format!("{src} len {len}"));
                }
                let want: Vec<f64> = rows.iter().map(|r| expected_arg(r, max) as f64).collect();
                assert_eq!(b[0].to_f64_vec(), want, "{op} {dtype} rows, len {len}");
                assert_eq!(b[1].to_f64_vec(), want, "{op} {dtype} columns, len {len}");
                assert_eq!(b[2].to_f64_vec(), want, "{op} {dtype} keepdims, len {len}");
                assert_eq!(
                    b[3].to_f64_vec(),
                    vec![expected_arg(&flat, max) as f64],
                    "{op} {dtype} flat, len {len}"
                );
            }
        }
    }
}

/// Row sums with a fused prologue, of every length up to 80 (every count of whole blocks of 8
/// and every tail), and past the pairwise split, bit for bit against the interpreter: the
/// prologue is exact arithmetic (`mul`), so any difference is the order of the additions.
#[test]
fn row_sums_of_every_length_match_the_reference() {
    let mut rng = Rng(11);
    for dtype in ["f32", "f64"] {
        let src = format!(
            "func @f(%x: {dtype}[?, ?]) -> ({dtype}[?], {dtype}[?]) {{\n  %e = mul %x, %x\n  %s = sum %e {{axes = [1]}}\n  %m = max %x {{axes = [1]}}\n  return %s, %m\n}}\n"
        );
        for len in (1..=80).chain([127, 128, 129, 200, 257, 1000]) {
            let x = tensor(dtype, &[3, len], &mut rng, false);
            let (a, b, ran) = call_both(&src, &[x.view()]);
            assert_eq!(ran, 2, "len {len}: not every reduction ran generated code");
            for (p, q) in a.iter().zip(&b) {
                assert_same_bits(p, q, &format!("{dtype} len {len}"));
            }
        }
    }
}

/// Sums down columns (a bias gradient's sum over the batch) of every length, bit for bit
/// against the interpreter: the host's row-by-row column sum keeps the reference's pairwise
/// order. The last shape is large enough to be split among threads.
#[test]
fn column_sums_of_every_length_match_the_reference() {
    let mut rng = Rng(12);
    for dtype in ["f32", "f64"] {
        let src = format!(
            "func @f(%x: {dtype}[?, ?]) -> ({dtype}[?]) {{\n  %s = sum %x {{axes = [0]}}\n  return %s\n}}\n"
        );
        let shapes = (1..=40).chain([127, 128, 129, 257, 1000]).map(|r| [r, 37]);
        for shape in shapes.chain([[300, 1000]]) {
            let x = tensor(dtype, &shape, &mut rng, false);
            let (a, b, ran) = call_both(&src, &[x.view()]);
            assert_eq!(ran, 1, "{shape:?}: the sum did not run generated code");
            assert_same_bits(&a[0], &b[0], &format!("{dtype} {shape:?}"));
        }
    }
}

/// Max and min of floats bit for bit against the interpreter on the special rows (NaN that
/// sticks, -0.0 next to 0.0, infinities): along rows (lanes along the reduced axis), down
/// columns (a vector of outputs per lane), down a transposed view (scalar leaves) and over the
/// whole array, every call in generated code.
#[test]
fn max_and_min_of_floats_match_the_reference_on_nan_and_signed_zero() {
    for dtype in ["f32", "f64"] {
        for op in ["max", "min"] {
            let src = format!(
                "func @f(%x: {dtype}[?, ?]) -> ({dtype}[?], {dtype}[?], {dtype}[?], {dtype}[]) {{\n  %r = {op} %x {{axes = [1]}}\n  %c = {op} %x {{axes = [0]}}\n  %t = transpose %x {{perm = [1, 0]}}\n  %s = {op} %t {{axes = [0]}}\n  %a = {op} %x\n  return %r, %c, %s, %a\n}}\n"
            );
            for len in [1, 7, 8, 9, 16, 17, 33, 130] {
                let rows = special_rows(len);
                let x = rows_tensor(dtype, &rows);
                let (a, b, ran) = call_both(&src, &[x.view()]);
                assert_eq!(ran, 4, "{src}: not every reduction ran generated code");
                // Bit for bit, except which zero a row of tied zeros gives: the reference's
                // running extremes start from the first element, the generated leaves' from
                // -inf, and neither numpy nor CONTRACTS §1 fixes the sign there.
                for (k, (p, q)) in a.iter().zip(&b).enumerate() {
                    let unsign = |t: &Tensor| -> Vec<f64> {
                        t.to_f64_vec()
                            .into_iter()
                            .map(|v| if v == 0.0 { 0.0 } else { v })
                            .collect()
                    };
                    let (p, q) = (unsign(p), unsign(q));
                    for (i, (u, v)) in p.iter().zip(&q).enumerate() {
                        let same = u.to_bits() == v.to_bits() || (u.is_nan() && v.is_nan());
                        assert!(same, "{op} {dtype} len {len} output {k}[{i}]: {u} vs {v}");
                    }
                }
                // A NaN anywhere in a row makes its result NaN.
                for (r, got) in rows.iter().zip(b[0].to_f64_vec()) {
                    assert_eq!(
                        r.iter().any(|v| v.is_nan()),
                        got.is_nan(),
                        "{op} {dtype} {r:?}"
                    );
                }
            }
        }
    }
}

/// Integers and bools: ties go to the first, the type's extremes, all-equal rows; and the flat
/// index over several dims of a transposed (non-mergeable) view.
#[test]
fn argmax_and_argmin_of_integers_and_bools() {
    let mut rng = Rng(41);
    for dtype in ["i32", "i64", "bool"] {
        for op in ["argmax", "argmin"] {
            let max = op == "argmax";
            let src = format!(
                "func @f(%x: {dtype}[?, ?, ?]) -> (i64[?, ?], i64[?, ?], i64[], i64[]) {{\n  %r = {op} %x {{axes = [2]}}\n  %c = {op} %x {{axes = [0]}}\n  %a = {op} %x\n  %t = transpose %x {{perm = [2, 0, 1]}}\n  %b = {op} %t\n  return %r, %c, %a, %b\n}}\n"
            );
            for shape in [[3usize, 5, 1], [4, 3, 17], [2, 9, 40], [5, 1, 8]] {
                let n: usize = shape.iter().product();
                // Few distinct values (many ties), with the dtype's extremes sprinkled in.
                let vals: Vec<i64> = (0..n)
                    .map(|_| match rng.next() % 9 {
                        0 => i64::MAX,
                        1 => i64::MIN,
                        k => k as i64 % 3,
                    })
                    .collect();
                let sh = IxDyn(&shape);
                let x = match dtype {
                    "i32" => Tensor::I32(
                        ArrayD::from_shape_vec(
                            sh,
                            vals.iter()
                                .map(|&v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                                .collect(),
                        )
                        .unwrap(),
                    ),
                    "i64" => Tensor::I64(ArrayD::from_shape_vec(sh, vals.clone()).unwrap()),
                    _ => Tensor::Bool(
                        ArrayD::from_shape_vec(sh, vals.iter().map(|&v| v > 0).collect()).unwrap(),
                    ),
                };
                let (a, b, ran) = call_both(&src, &[x.view()]);
                assert_eq!(ran, 4, "{src}");
                for (p, q) in a.iter().zip(&b) {
                    assert_same_bits(p, q, &format!("{src} on {shape:?}"));
                }
                let xs = x.to_f64_vec();
                assert_eq!(
                    b[2].to_f64_vec(),
                    vec![expected_arg(&xs, max) as f64],
                    "{src}"
                );
            }
            // All equal: index 0 everywhere.
            let x = Tensor::full(dtype.parse::<kiln::DType>().unwrap(), &[3, 4, 9], 1.0);
            let (_, b, _) = call_both(&src, &[x.view()]);
            assert!(
                b.iter().all(|t| t.to_f64_vec().iter().all(|&i| i == 0.0)),
                "{src}"
            );
        }
    }
}

/// Argmax of a fused prologue (`argmax(-|x| * m)` with `m` broadcast), of ops whose values are
/// exact on both backends, so the indices must match.
#[test]
fn fused_argmax_agrees_with_the_interpreter() {
    let mut rng = Rng(8);
    for dtype in ["f32", "f64"] {
        for (op, axis, mshape) in [
            ("argmax", 1, "[?, 1]"),
            ("argmin", 0, "[1, ?]"),
            ("argmax", 0, "[1, ?]"),
        ] {
            let src = format!(
                "func @f(%x: {dtype}[?, ?], %m: {dtype}{mshape}) -> (i64[?]) {{\n  %s = fused_reduce \"{op}\" %x, %m {{axes = [{axis}], program = \"%0 = input 0 : {dtype}; %1 = input 1 : {dtype}; %2 = abs %0 : {dtype}; %3 = neg %2 : {dtype}; %4 = mul %3, %1 : {dtype}; return %4\"}}\n  return %s\n}}\n"
            );
            for shape in [[3usize, 5], [17, 40], [40, 9]] {
                let x = tensor(dtype, &shape, &mut rng, true);
                let ms = if axis == 1 {
                    [shape[0], 1]
                } else {
                    [1, shape[1]]
                };
                let m = tensor(dtype, &ms, &mut rng, false);
                let (a, b, ran) = call_both(&src, &[x.view(), m.view()]);
                assert_eq!(ran, 1, "{src}");
                assert_same_bits(&a[0], &b[0], &format!("{src} on {shape:?}"));
            }
        }
    }
}

/// `t` with its axes reversed: a view whose strides run the other way (no copy).
fn reversed(t: &Tensor) -> kiln::TensorRef<'_> {
    kiln::for_each_dtype!(t, a => a.view().reversed_axes().into())
}

/// `t` broadcast to `shape` as a view (stride 0 along the broadcast dims).
fn broadcast<'a>(t: &'a Tensor, shape: &[usize]) -> kiln::TensorRef<'a> {
    let sh = IxDyn(shape);
    kiln::for_each_dtype!(t, a => a.broadcast(sh).unwrap().into())
}

/// Reductions whose reduced dims do not merge into one strided loop (axes `[0, 2]` of a
/// contiguous array, a view with reversed axes, a broadcast view), ranks 3 to 6, with kept dims
/// that do not merge either (up to three runs of them, the outer ones looped at call time):
/// every op, every dtype, keepdims on and off, large enough that sums split pairwise and run
/// on several threads. Sums and means must have the reference's bits, every call generated code.
#[test]
fn reductions_over_axes_that_do_not_merge() {
    let mut rng = Rng(2024);
    let cases: &[(&[usize], &[usize])] = &[
        (&[5, 7, 9], &[0, 2]),
        (&[3, 4, 5, 6], &[1, 3]),
        (&[3, 4, 5, 6], &[0, 1, 3]),
        (&[2, 3, 4, 5, 6], &[0, 2, 4]),
        (&[2, 3, 2, 3, 2, 5], &[1, 3, 5]),
        (&[3, 2, 4, 2, 5, 2], &[1, 3, 5]),
        (&[40, 3, 700], &[0, 2]),
        (&[64, 5, 64, 7], &[0, 2]),
        // Three runs of kept dims, the outer one split across threads.
        (&[9, 12, 5, 12, 7, 3], &[1, 3, 5]),
    ];
    let ops = ["sum", "mean", "max", "min", "prod", "any", "all"];
    for (c, &(shape, axes)) in cases.iter().enumerate() {
        let rank = shape.len();
        // Two dtypes a case, keepdims on for one and off for the other: over the cases every
        // dtype meets both (compiling dominates this test in a debug build).
        for (k, dtype) in [DTYPES[c % 5], DTYPES[(c + 2) % 5]].into_iter().enumerate() {
            let keepdims = (c + k) % 2 == 0;
            let dims = vec!["?"; rank];
            let mut outs = Vec::new();
            let mut body = String::new();
            for op in ops {
                outs.push((op, rtype(op, dtype, &dims, axes, keepdims)));
                body.push_str(&format!(
                    "  %{op} = {op} %x {{axes = {axes:?}, keepdims = {keepdims}}}\n"
                ));
            }
            // Argmax over several axes is the flat index over all of them.
            for op in ["argmax", "argmin"] {
                outs.push((op, "i64[]".to_string()));
                body.push_str(&format!("  %{op} = {op} %x\n"));
            }
            let src = format!(
                "func @f(%x: {dtype}[{}]) -> ({}) {{\n{body}  return {}\n}}\n",
                shape_text(rank),
                outs.iter()
                    .map(|o| o.1.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                outs.iter()
                    .map(|o| format!("%{}", o.0))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            // Specials in the small cases only: a long float product with an infinity is NaN
            // or infinite depending on where it underflows, and products run in eight partial
            // products here (the tolerance above), one in the reference.
            let small_case = shape.iter().product::<usize>() < 5000;
            let x = tensor(dtype, shape, &mut rng, c % 2 == 0 && small_case);
            // Broadcast along the first and the last dim.
            let mut small_shape = shape.to_vec();
            small_shape[0] = 1;
            small_shape[rank - 1] = 1;
            let small = tensor(dtype, &small_shape, &mut rng, false);
            for (layout, view) in [
                ("contiguous", x.view()),
                ("reversed axes", reversed(&x)),
                ("broadcast", broadcast(&small, shape)),
            ] {
                let (a, b, ran) = call_both(&src, &[view]);
                assert_eq!(
                    ran,
                    outs.len(),
                    "{src} ({layout}): some reduction did not run generated code"
                );
                for ((p, q), (op, _)) in a.iter().zip(&b).zip(&outs) {
                    let what = format!("{op} of {dtype}{shape:?} over {axes:?} ({layout})");
                    if *op == "prod" && dtype.starts_with('f') {
                        assert_close(p, q, tolerance(op, dtype), &what);
                    } else {
                        assert_same_bits(p, q, &what);
                    }
                }
            }
        }
    }
}

/// Row sums whose prologue expands math (exp, tanh, log, sin, sigmoid: the vector loops read
/// the expansions' operand constants from a table) give exactly the bits of the same math in a
/// map kernel followed by a plain row sum: the same expansion, summed in the same order. Every
/// row length up to 40 and past the pairwise split, f32 and f64.
#[test]
fn fused_math_prologues_sum_the_bits_of_the_map_kernels() {
    let cpu = |src: String| compile(&src, Backend::Cpu);
    let mut rng = Rng(23);
    for dtype in ["f32", "f64"] {
        let sum = cpu(format!(
            "func @s(%e: {dtype}[?, ?]) -> ({dtype}[?]) {{\n  %s = sum %e {{axes = [1]}}\n  return %s\n}}\n"
        ));
        for op in ["exp", "tanh", "log", "sin", "sigmoid"] {
            let fused = cpu(format!(
                "func @f(%x: {dtype}[?, ?]) -> ({dtype}[?]) {{\n  %e = {op} %x\n  %s = sum %e {{axes = [1]}}\n  return %s\n}}\n"
            ));
            let map = cpu(format!(
                "func @m(%x: {dtype}[?, ?]) -> ({dtype}[?, ?]) {{\n  %e = {op} %x\n  return %e\n}}\n"
            ));
            for len in (1..=40).chain([127, 128, 129, 257, 1000]) {
                let x = tensor(dtype, &[3, len], &mut rng, false);
                let before = kiln::jit_cpu::generated_reduce_calls_on_this_thread();
                let got = fused.call(&[x.view()]).unwrap().remove(0);
                let ran = kiln::jit_cpu::generated_reduce_calls_on_this_thread() - before;
                assert_eq!(ran, 1, "{op} {dtype} len {len}: the fused sum did not run");
                let e = map.call(&[x.view()]).unwrap().remove(0);
                let want = sum.call(&[e.view()]).unwrap().remove(0);
                assert_same_bits(&want, &got, &format!("sum({op}) {dtype} len {len}"));
            }
        }
    }
}

/// A float sum starts from +0.0, so a sum of -0.0 copies is +0.0 with the optimizer on or off
/// (its rule for a sum of a broadcast, `x * n`, once kept -0.0, and a division by the sum
/// turned -inf into +inf).
#[test]
fn a_sum_of_negative_zeros_is_positive_zero_optimized_or_not() {
    for backend in [Backend::Interp, Backend::Cpu] {
        for optimize in [false, true] {
            let g = kiln::Graph::new();
            let x = g.input("x", kiln::f32, []);
            let b = x.broadcast_to(&[3]);
            let sums = [
                b.sum(None, false),
                b.sum(Some(&[]), false),
                b.sum(Some(&[0]), true),
                x.sum(None, false),
            ];
            let quotient = &(&b * 0.0 - 1.5) / &sums[1];
            let outs: Vec<&kiln::Var> = sums.iter().chain([&quotient]).collect();
            let f = kiln::function(&[&x], &outs)
                .options(CompileOptions {
                    backend: Some(backend),
                    optimize,
                    ..Default::default()
                })
                .compile()
                .unwrap();
            let minus_zero = Tensor::F32(ArrayD::from_elem(IxDyn(&[]), -0.0));
            let got = f.call(&[minus_zero.view()]).unwrap();
            for (k, t) in got[..4].iter().enumerate() {
                for v in t.to_f64_vec() {
                    assert!(
                        v == 0.0 && v.is_sign_positive(),
                        "{backend:?} optimize {optimize}: sum {k} is {v:?}"
                    );
                }
            }
            assert_eq!(got[4].to_f64_vec(), vec![f64::NEG_INFINITY; 3]);
        }
    }
}

/// A fused prologue whose second operand `m` is broadcast along some of the reduced axes and
/// read along another, a `?` one that is 1 at the call: the reduced axes then merge into one
/// along which `m` steps by 0, not by its element size. `m` is the first element of a larger
/// array whose next elements are NaN, so a kernel that stepped through memory past it (as the
/// row leaves did: random program 484 of seed 1796410791390762651) returns NaN.
#[test]
fn operands_broadcast_along_some_reduced_axes_are_not_read_past() {
    for dtype in ["f32", "f64"] {
        for axes in ["[0, 1, 2]", "[1, 2]"] {
            let rt = if axes == "[0, 1, 2]" {
                format!("{dtype}[]")
            } else {
                format!("{dtype}[4]")
            };
            let src = format!(
                "func @f(%x: {dtype}[4, 6, ?], %m: {dtype}[1, 1, ?]) -> ({rt}) {{\n  %s = fused_reduce \"sum\" %x, %m {{axes = {axes}, program = \"%0 = input 0 : {dtype}; %1 = input 1 : {dtype}; %2 = maximum %0, %1 : {dtype}; %3 = tanh %2 : {dtype}; return %3\"}}\n  return %s\n}}\n"
            );
            let mut rng = Rng(5);
            let x = tensor(dtype, &[4, 6, 1], &mut rng, false);
            // One finite element, then NaNs: `m` is a view of the first.
            let wide = match dtype {
                "f32" => Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[1, 1, 64]), |i| {
                    if i[2] == 0 {
                        0.25
                    } else {
                        f32::NAN
                    }
                })),
                _ => Tensor::F64(ArrayD::from_shape_fn(IxDyn(&[1, 1, 64]), |i| {
                    if i[2] == 0 {
                        0.25
                    } else {
                        f64::NAN
                    }
                })),
            };
            let m = match &wide {
                Tensor::F32(a) => {
                    Tensor::F32(a.slice(ndarray::s![.., .., 0..1]).to_owned().into_dyn())
                }
                Tensor::F64(a) => {
                    Tensor::F64(a.slice(ndarray::s![.., .., 0..1]).to_owned().into_dyn())
                }
                _ => unreachable!(),
            };
            let wide_view = match &wide {
                Tensor::F32(a) => {
                    kiln::TensorRef::F32(a.slice(ndarray::s![.., .., 0..1]).into_dyn())
                }
                Tensor::F64(a) => {
                    kiln::TensorRef::F64(a.slice(ndarray::s![.., .., 0..1]).into_dyn())
                }
                _ => unreachable!(),
            };
            let want = compile(&src, Backend::Interp)
                .call(&[x.view(), m.view()])
                .unwrap()
                .remove(0);
            assert!(want.to_f64_vec().iter().all(|v| v.is_finite()), "{src}");
            let got = compile(&src, Backend::Cpu)
                .call(&[x.view(), wide_view])
                .unwrap()
                .remove(0);
            // tanh's ulps (the interpreter's libm, the kernel's own).
            let rel = if dtype == "f32" { 1e-5 } else { 1e-12 };
            assert_close(&want, &got, rel, &src);
        }
    }
}
