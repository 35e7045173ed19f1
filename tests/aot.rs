//! Ahead-of-time compilation end to end: each test writes an object file and its header,
//! compiles a small generated C driver with `cc`, links, runs it on inputs written to binary
//! files, and compares what it wrote with the JIT's (CPU backend) results. The driver calls the
//! entry point twice with differently poisoned outputs and scratch, so an element left
//! unwritten or a dependence on leftover memory shows up as a difference. Tests that need `cc`
//! (or `c++`) say that they were skipped when it is missing.

#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;

use common::split_top;
use kiln::aot::{c_type, AotArtifact, AotOptions};
use kiln::ir::text::{parse, parse_literal};
use kiln::ir::{Func, Value};
use kiln::{
    compile_func, function, Backend, CompileOptions, DType, Graph, Tensor, TensorType, Var,
};
use ndarray::{ArrayD, IxDyn};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

macro_rules! need_cc {
    () => {
        if !have("cc") {
            eprintln!("skipped: no C compiler `cc` on PATH");
            return;
        }
    };
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-aot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bytes_of(t: &Tensor) -> Vec<u8> {
    let mut out = Vec::new();
    match t {
        Tensor::Bool(a) => out.extend(a.iter().map(|&x| x as u8)),
        Tensor::I32(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
        Tensor::I64(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
        Tensor::F32(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
        Tensor::F64(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
        Tensor::F16(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
        Tensor::BF16(a) => a.iter().for_each(|x| out.extend(x.to_ne_bytes())),
    }
    out
}

fn tensor_of(dtype: DType, shape: &[usize], b: &[u8]) -> Tensor {
    let sh = IxDyn(shape);
    let n = dtype.size();
    let chunks = b.chunks_exact(n);
    match dtype {
        DType::Bool => {
            Tensor::Bool(ArrayD::from_shape_vec(sh, b.iter().map(|&x| x != 0).collect()).unwrap())
        }
        DType::I32 => Tensor::I32(
            ArrayD::from_shape_vec(
                sh,
                chunks
                    .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
                    .collect(),
            )
            .unwrap(),
        ),
        DType::I64 => Tensor::I64(
            ArrayD::from_shape_vec(
                sh,
                chunks
                    .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
                    .collect(),
            )
            .unwrap(),
        ),
        DType::F32 => Tensor::F32(
            ArrayD::from_shape_vec(
                sh,
                chunks
                    .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
                    .collect(),
            )
            .unwrap(),
        ),
        DType::F64 => Tensor::F64(
            ArrayD::from_shape_vec(
                sh,
                chunks
                    .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
                    .collect(),
            )
            .unwrap(),
        ),
        DType::F16 | DType::BF16 => {
            let bits: Vec<u16> = chunks
                .map(|c| u16::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            let h = |b: &u16| kiln::half::f16::from_bits(*b);
            let bh = |b: &u16| kiln::half::bf16::from_bits(*b);
            match dtype {
                DType::F16 => {
                    Tensor::F16(ArrayD::from_shape_vec(sh, bits.iter().map(h).collect()).unwrap())
                }
                _ => {
                    Tensor::BF16(ArrayD::from_shape_vec(sh, bits.iter().map(bh).collect()).unwrap())
                }
            }
        }
    }
}

/// A C program that reads the inputs from `inN.bin`, calls the entry point twice with
/// differently poisoned outputs and scratch, checks that both calls wrote the same, and writes
/// the outputs to `outN.bin`.
fn c_driver(art: &AotArtifact) -> String {
    let mut s = String::new();
    let sym = &art.symbol;
    let _ = writeln!(
        s,
        r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{sym}.h"

static void *load(const char *path, size_t n) {{
    void *p = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, n, f) != n) {{ fprintf(stderr, "cannot read %s\n", path); exit(2); }}
    fclose(f);
    return p;
}}

static void save(const char *path, const void *p, size_t n) {{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {{ fprintf(stderr, "cannot write %s\n", path); exit(2); }}
    fclose(f);
}}

static void *poisoned(size_t n, int byte) {{
    size_t m = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, m ? m : 64);
    if (!p) {{ fprintf(stderr, "out of memory\n"); exit(2); }}
    memset(p, byte, m);
    return p;
}}

int main(void) {{
    (void)load;"#
    );
    let bytes = |a: &kiln::aot::AotArg| a.shape.iter().product::<usize>() * a.dtype.size();
    for (i, a) in art.inputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "    const {t} *in{i} = ({t} *)load(\"in{i}.bin\", {n});",
            t = c_type(a.dtype),
            n = bytes(a)
        );
    }
    for (o, a) in art.outputs.iter().enumerate() {
        let _ = writeln!(s, "    {} *out{o}[2];", c_type(a.dtype));
    }
    s.push_str(
        "    for (int run = 0; run < 2; run++) {\n        int poison = run ? 0x5A : 0xA5;\n",
    );
    for (o, a) in art.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "        out{o}[run] = ({} *)poisoned({}, poison);",
            c_type(a.dtype),
            bytes(a)
        );
    }
    let mut args: Vec<String> = (0..art.inputs.len()).map(|i| format!("in{i}")).collect();
    args.extend((0..art.outputs.len()).map(|o| format!("out{o}[run]")));
    if art.scratch_bytes > 0 {
        let _ = writeln!(
            s,
            "        void *scratch = poisoned({sym}_scratch_bytes, poison);"
        );
        args.push("scratch".into());
    }
    // The first run through the entry point, the second through the compact convention
    // (`{sym}_call`, the arrays placed by their `_INDEX` macros): both must write the same.
    let upper = sym.to_uppercase();
    let _ = writeln!(
        s,
        "        if (run == 0) {{\n            {sym}({});\n        }} else {{",
        args.join(", ")
    );
    let _ = writeln!(
        s,
        "            const void *ins[{}];\n            void *outs[{}];",
        art.inputs.len().max(1),
        art.outputs.len().max(1)
    );
    for (i, a) in art.inputs.iter().enumerate() {
        let name = a.name.to_uppercase();
        let _ = writeln!(s, "            ins[{upper}_{name}_INDEX] = in{i};");
    }
    for (o, a) in art.outputs.iter().enumerate() {
        let name = a.name.to_uppercase();
        let _ = writeln!(s, "            outs[{upper}_{name}_INDEX] = out{o}[run];");
    }
    let scratch = if art.scratch_bytes > 0 {
        "scratch"
    } else {
        "NULL"
    };
    let _ = writeln!(
        s,
        "            (void)ins; (void)outs;\n            {sym}_call(ins, outs, {scratch});\n        }}\n    }}"
    );
    for (o, a) in art.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "    if (memcmp(out{o}[0], out{o}[1], {n})) {{ fprintf(stderr, \"output {o} differs between two calls\\n\"); return 3; }}\n    save(\"out{o}.bin\", out{o}[0], {n});",
            n = bytes(a)
        );
    }
    s.push_str("    return 0;\n}\n");
    s
}

/// Writes the object and header, builds the C driver, runs it on `inputs`, returns the outputs.
fn run_c(art: &AotArtifact, inputs: &[Tensor], name: &str) -> Vec<Tensor> {
    let dir = tmpdir(name);
    art.write(
        &dir.join(format!("{}.o", art.symbol)),
        Some(&dir.join(format!("{}.h", art.symbol))),
    )
    .unwrap();
    assert_eq!(inputs.len(), art.inputs.len(), "{name}: input count");
    for (i, t) in inputs.iter().enumerate() {
        assert_eq!(t.dtype(), art.inputs[i].dtype, "{name}: input {i}");
        assert_eq!(t.shape(), &art.inputs[i].shape[..], "{name}: input {i}");
        std::fs::write(dir.join(format!("in{i}.bin")), bytes_of(t)).unwrap();
    }
    std::fs::write(dir.join("main.c"), c_driver(art)).unwrap();
    let cc = Command::new("cc")
        .current_dir(&dir)
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "main.c"])
        .arg(format!("{}.o", art.symbol))
        .args(aot_lib::runtime_args(&[art]).unwrap())
        .args(["-lm", "-o", "main"])
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{name}: cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(dir.join("main"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{name}: the driver failed ({:?}):\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let outs = art
        .outputs
        .iter()
        .enumerate()
        .map(|(o, a)| {
            let b = std::fs::read(dir.join(format!("out{o}.bin"))).unwrap();
            tensor_of(a.dtype, &a.shape, &b)
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    outs
}

/// Whether two tensors are the same bits (any NaN matches any NaN: payloads are not kept).
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && bytes_of(a)
            .chunks(a.dtype().size().max(1))
            .zip(bytes_of(b).chunks(b.dtype().size().max(1)))
            .all(|(x, y)| {
                let nan = |c: &[u8]| match c.len() {
                    4 if a.dtype().is_float() => f32::from_le_bytes(c.try_into().unwrap()).is_nan(),
                    8 if a.dtype().is_float() => f64::from_le_bytes(c.try_into().unwrap()).is_nan(),
                    _ => false,
                };
                x == y || (nan(x) && nan(y))
            })
}

/// Asserts that `got` is `want` within `rel * |want| + abs` (floats; NaN matches NaN and
/// infinities must be equal), exactly for integers and bools.
fn assert_close(got: &Tensor, want: &Tensor, rel: f64, abs: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let exact = !got.dtype().is_float();
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = if exact {
            *g == w
        } else {
            (g.is_nan() && w.is_nan())
                || *g == w
                || (g.is_finite() && w.is_finite() && (g - w).abs() <= rel * w.abs() + abs)
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// The CPU backend's (JIT) results for `func` on `inputs`.
fn jit(func: &Func, inputs: &[Tensor]) -> Vec<Tensor> {
    let opts = CompileOptions {
        backend: Some(Backend::Cpu),
        ..CompileOptions::default()
    };
    let f = compile_func(func.clone(), &opts).unwrap();
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    f.call(&refs).unwrap()
}

fn normal(seed: u64, shape: &[usize], scale: f32) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    ArrayD::from_shape_vec(
        IxDyn(shape),
        (0..n as u64)
            .map(|i| scale * kiln::random::normal_f32(seed, i))
            .collect(),
    )
    .unwrap()
}

fn parse1(src: &str) -> Func {
    parse("test.kir", src).unwrap().remove(0)
}

fn aot(func: &Func) -> AotArtifact {
    kiln::aot::compile_func(func, &AotOptions::default()).unwrap()
}

#[test]
fn w1_matches_the_jit() {
    need_cc!();
    let n = 10_000;
    let f = parse1(&format!(
        "func @w1(%x: f32[{n}], %y: f32[{n}]) -> (f32[{n}]) {{
  %a = mul %x, %x
  %b = neg %a
  %c = exp %b
  %d = sin %y
  %e = mul %c, %d
  %h = const 0.5 : f32[]
  %f = mul %x, %y
  %g = mul %h, %f
  %r = add %e, %g
  return %r
}}"
    ));
    let art = aot(&f);
    assert_eq!(art.scratch_bytes, 0, "one fused kernel needs no scratch");
    assert!(art
        .header
        .contains("int32_t w1(const float *x, const float *y, float *out0);"));
    let inputs = vec![
        Tensor::F32(normal(1, &[n], 2.0)),
        Tensor::F32(normal(2, &[n], 3.0)),
    ];
    let got = run_c(&art, &inputs, "w1");
    let want = jit(&f, &inputs);
    // The same kernel and the same libm functions: equal up to an ulp or two.
    assert_close(&got[0], &want[0], 3e-7, 1e-30, "w1");
}

#[test]
fn row_softmax_matches_the_jit() {
    need_cc!();
    let f = parse1(
        "func @softmax(%x: f32[64, 100]) -> (f32[64, 100]) {
  %m = max %x {axes = [1], keepdims = true}
  %d = sub %x, %m
  %e = exp %d
  %s = sum %e {axes = [1], keepdims = true}
  %y = div %e, %s
  return %y
}",
    );
    let inputs = vec![Tensor::F32(normal(3, &[64, 100], 4.0))];
    let got = run_c(&aot(&f), &inputs, "softmax");
    assert_close(&got[0], &jit(&f, &inputs)[0], 2e-6, 1e-30, "softmax");

    // Over a middle axis, with the sum fused with its exp (rows gathered through scratch).
    let f = parse1(
        "func @softmax_mid(%x: f64[4, 50, 6]) -> (f64[4, 50, 6], f64[4, 6]) {
  %m = max %x {axes = [1], keepdims = true}
  %d = sub %x, %m
  %e = exp %d
  %s = sum %e {axes = [1], keepdims = true}
  %y = div %e, %s
  %l = log %s
  %q = reshape %l {shape = [4, 6]}
  return %y, %q
}",
    );
    let inputs = vec![Tensor::F64(normal(4, &[4, 50, 6], 3.0).mapv(f64::from))];
    let got = run_c(&aot(&f), &inputs, "softmax_mid");
    let want = jit(&f, &inputs);
    assert_close(&got[0], &want[0], 1e-13, 1e-300, "softmax over axis 1");
    assert_close(&got[1], &want[1], 1e-13, 1e-300, "log-sum-exp over axis 1");
}

#[test]
fn reductions_over_any_axes_match_the_jit() {
    need_cc!();
    // Fused prologues over the first, middle, several and all axes; reductions of views
    // (transposed, sliced, broadcast), of integers and bools; NaN in max and argmax.
    let f = parse1(
        "func @red(%x: f32[6, 5, 4], %y: f32[5, 4], %k: i32[6, 5], %z: f64[7, 3]) -> (f32[5, 4], f32[6, 1, 4], f32[], f32[5], i64[5, 4], i32[5], i32[6], f64[6], bool[5], bool[6], f64[3], i64[3], f32[4, 6]) {
  %p = mul %x, %y
  %e = exp %p
  %s0 = sum %e {axes = [0]}
  %q = mul %x, %x
  %s1 = sum %q {axes = [1], keepdims = true}
  %r = sub %x, %y
  %a = abs %r
  %s2 = mean %a
  %t = transpose %x {perm = [2, 1, 0]}
  %m = max %t {axes = [0, 2]}
  %am = argmax %x {axes = [0]}
  %ks = sum %k {axes = [0]}
  %kp = prod %k {axes = [1]}
  %km = mean %k {axes = [1]}
  %zero = const 0 : i32[]
  %g = gt %k, %zero
  %any = any %g {axes = [0]}
  %all = all %g {axes = [1]}
  %zs = slice %z {starts = [6], stops = [null], steps = [-2]}
  %zm = max %zs {axes = [0]}
  %za = argmin %zs {axes = [0]}
  %xt = transpose %x {perm = [0, 2, 1]}
  %xm = min %xt {axes = [2]}
  %xmt = transpose %xm {perm = [1, 0]}
  return %s0, %s1, %s2, %m, %am, %ks, %kp, %km, %any, %all, %zm, %za, %xmt
}",
    );
    let mut x = normal(5, &[6, 5, 4], 1.0);
    x[[2, 3, 1]] = f32::NAN;
    let mut z = normal(6, &[7, 3], 1.0).mapv(f64::from);
    z[[2, 1]] = f64::NAN;
    let k = ArrayD::from_shape_fn(IxDyn(&[6, 5]), |i| (i[0] as i32 * 7 - i[1] as i32 * 3) % 5);
    let inputs = vec![
        Tensor::F32(x),
        Tensor::F32(normal(7, &[5, 4], 1.0)),
        Tensor::I32(k),
        Tensor::F64(z),
    ];
    let fused = kiln::compile::optimize(f.clone(), &CompileOptions::default());
    let text = kiln::ir::text::print_func(&fused);
    assert!(
        text.contains("fused_reduce"),
        "the test should cover fused reductions:\n{text}"
    );
    let got = run_c(&aot(&f), &inputs, "reductions");
    let want = jit(&f, &inputs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // The reference's order of operations: bit-identical today; a little room for the
        // kernels' math changing (inline polynomials) while the JIT's perform path does not.
        assert_close(g, w, 1e-6, 1e-30, &format!("output {i}"));
    }
}

/// Reductions whose fused prologue casts 64-bit floats to integers: Cranelift cannot lower
/// that cast for vectors on x86, so their vector leaves fail after they were declared, and an
/// object must still define every function it declares (a random program's
/// `prod(cast(x, i64))` panicked the object writer).
#[test]
fn reductions_of_casts_cranelift_cannot_vectorize_run_ahead_of_time() {
    need_cc!();
    let f = parse1(
        "func @casts(%x: f64[64], %y: f64[3, 8]) -> (i64[], i64[], i64[3], i64[8]) {
  %c = cast %x {to = i64}
  %s = sum %c
  %n = neg %x
  %cn = cast %n {to = i64}
  %p = prod %cn
  %d = cast %y {to = i64}
  %m = max %d {axes = [1]}
  %y2 = mul %y, %y
  %d2 = cast %y2 {to = i64}
  %a = argmax %d2 {axes = [0]}
  return %s, %p, %m, %a
}",
    );
    // Truncated to 1, -1, 2 and 1: a product of sixteen 2s and sixteen -1s.
    let x = ArrayD::from_shape_fn(IxDyn(&[64]), |i| [1.5, -1.25, 2.5, 1.0][i[0] % 4]);
    let y = normal(11, &[3, 8], 4.0).mapv(f64::from);
    let inputs = vec![Tensor::F64(x), Tensor::F64(y)];
    let fused = kiln::compile::optimize(f.clone(), &CompileOptions::default());
    let text = kiln::ir::text::print_func(&fused);
    assert_eq!(
        text.matches("fused_reduce").count(),
        4,
        "the test should cover fused reductions of casts:\n{text}"
    );
    let got = run_c(&aot(&f), &inputs, "casts");
    let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
    let want = compile_func(
        f.clone(),
        &CompileOptions {
            backend: Some(Backend::Interp),
            ..CompileOptions::default()
        },
    )
    .unwrap()
    .call(&refs)
    .unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            same_bits(g, w),
            "output {i}: {g:?} against the interpreter's {w:?}"
        );
    }
}

fn cross_entropy(logits: &Var, targets: &Var) -> Var {
    let m = logits.max(Some(&[1]), true);
    let shifted = logits - &m;
    let log_softmax = &shifted - shifted.exp().sum(Some(&[1]), true).log();
    -(log_softmax * targets)
        .sum(Some(&[1]), false)
        .mean(None, false)
}

struct Mlp {
    x: Var,
    t: Var,
    params: Vec<Var>,
    logits: Var,
    loss: Var,
    grads: Vec<Var>,
    values: HashMap<String, Tensor>,
}

/// A two-layer perceptron with every shape known: sizes chosen so that the matrix products
/// have k above the kernel's k block and m, n not multiples of the register tile.
fn mlp(batch: usize, dim: usize, hidden: usize, classes: usize) -> Mlp {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(batch as i64), Some(dim as i64)]);
    let t = g.input(
        "targets",
        kiln::f32,
        [Some(batch as i64), Some(classes as i64)],
    );
    let init = |seed, r, c| normal(seed, &[r, c], 1.0 / (r as f32).sqrt());
    let mut values = HashMap::new();
    let mut shared = |name: &str, a: ArrayD<f32>| {
        values.insert(name.to_string(), Tensor::F32(a.clone()));
        g.shared(name, a)
    };
    let w1 = shared("w1", init(10, dim, hidden));
    let b1 = shared("b1", normal(11, &[hidden], 0.1));
    let w2 = shared("w2", init(12, hidden, classes));
    let b2 = shared("b2", normal(13, &[classes], 0.1));
    let h = (x.matmul(&w1) + &b1).tanh();
    let logits = h.matmul(&w2) + &b2;
    let loss = cross_entropy(&logits, &t).named("loss");
    let params = vec![w1, b1, w2, b2];
    let refs: Vec<&Var> = params.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    Mlp {
        x,
        t,
        params,
        logits,
        loss,
        grads,
        values,
    }
}

/// The inputs of an AOT entry point: explicit inputs by position, shared variables by name.
fn entry_inputs(
    art: &AotArtifact,
    explicit: &[Tensor],
    shared: &HashMap<String, Tensor>,
) -> Vec<Tensor> {
    art.inputs
        .iter()
        .enumerate()
        .map(|(i, a)| match explicit.get(i) {
            Some(t) => t.clone(),
            None => shared[&a.name].clone(),
        })
        .collect()
}

#[test]
fn mlp_forward_pass_matches_the_jit() {
    need_cc!();
    let (batch, dim, hidden, classes) = (50, 300, 70, 10);
    let m = mlp(batch, dim, hidden, classes);
    let pred = m.logits.argmax(Some(1), false);
    let build = || function(&[&m.x], &[&m.logits, &pred]).name("mlp_forward");
    let art = build().aot(&AotOptions::default()).unwrap();
    let names: Vec<&str> = art.inputs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names[0], "x");
    assert_eq!(names.len(), 5, "x and the four shared variables: {names:?}");
    let x = Tensor::F32(normal(20, &[batch, dim], 1.0));
    let got = run_c(
        &art,
        &entry_inputs(&art, std::slice::from_ref(&x), &m.values),
        "mlp_forward",
    );
    let want = build()
        .backend(Backend::Cpu)
        .compile()
        .unwrap()
        .call(&[x.view()])
        .unwrap();
    assert_close(&got[0], &want[0], 1e-5, 1e-5, "logits");
    // Predictions may differ only where two logits are within rounding of each other.
    let (gp, wp) = (got[1].to_f64_vec(), want[1].to_f64_vec());
    let same = gp.iter().zip(&wp).filter(|(a, b)| a == b).count();
    assert!(same + 1 >= gp.len(), "predictions: {gp:?} vs {wp:?}");
}

/// With `AotOptions::runtime` the products run in kiln's runtime library, the JIT's GEMM, and
/// the hidden layer's tanh in its 256-bit math: the forward pass (a 300-deep product: two k chunks)
/// has the JIT's bits, as the self-contained object has, and the object names the library it
/// needs.
#[test]
fn mlp_forward_pass_through_the_runtime_library_has_the_jits_bits() {
    need_cc!();
    let (batch, dim, hidden, classes) = (50, 300, 70, 10);
    let m = mlp(batch, dim, hidden, classes);
    let build = || function(&[&m.x], &[&m.logits]).name("mlp_rt");
    let x = Tensor::F32(normal(21, &[batch, dim], 1.0));
    let want = build()
        .backend(Backend::Cpu)
        .compile()
        .unwrap()
        .call(&[x.view()])
        .unwrap();
    for runtime in [false, true] {
        let options = AotOptions {
            runtime,
            ..AotOptions::default()
        };
        let art = build().aot(&options).unwrap();
        let rt: Vec<&str> = art.runtime.iter().map(String::as_str).collect();
        if runtime {
            // The products, and the hidden layer's tanh where the JIT would hand it to host math.
            let mut want = vec!["kiln_rt_gemm_f32"];
            if kiln::codegen::clif::host_math::enabled() {
                want.push("kiln_rt_vmath_tanh_f32");
            }
            assert_eq!(rt, want);
            assert!(art.header.contains("libkiln_rt.a"), "{}", art.header);
        } else {
            assert!(rt.is_empty(), "{rt:?}");
            assert!(!art.header.contains("libkiln_rt"), "{}", art.header);
        }
        let inputs = entry_inputs(&art, std::slice::from_ref(&x), &m.values);
        let got = run_c(&art, &inputs, &format!("mlp_rt_{runtime}"));
        assert!(
            same_bits(&got[0], &want[0]),
            "runtime {runtime}: {:?} vs the JIT's {:?}",
            got[0],
            want[0]
        );
    }
}

#[test]
fn mlp_training_step_writes_its_updates_to_output_buffers() {
    need_cc!();
    let (batch, dim, hidden, classes) = (50, 300, 70, 10);
    let m = mlp(batch, dim, hidden, classes);
    let lr = 0.5;
    let new: Vec<Var> = m
        .params
        .iter()
        .zip(&m.grads)
        .map(|(p, g)| p - g * lr)
        .collect();
    let mut step = function(&[&m.x, &m.t], &[&m.loss]).name("train_step");
    for (p, n) in m.params.iter().zip(&new) {
        step = step.update(p, n);
    }
    let art = step.aot(&AotOptions::default()).unwrap();
    let outs: Vec<&str> = art.outputs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(outs, ["loss", "w1_new", "b1_new", "w2_new", "b2_new"]);
    assert!(art
        .header
        .contains("the new value of the shared variable w1"));
    assert!(art.scratch_bytes > 0);

    let x = Tensor::F32(normal(21, &[batch, dim], 1.0));
    let labels: Vec<usize> = (0..batch).map(|i| (i * 7) % classes).collect();
    let t = Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[batch, classes]), |i| {
        (labels[i[0]] == i[1]) as u8 as f32
    }));
    let got = run_c(
        &art,
        &entry_inputs(&art, &[x.clone(), t.clone()], &m.values),
        "train_step",
    );
    // The reference: the same values as plain outputs of a JIT function.
    let mut outs: Vec<&Var> = vec![&m.loss];
    outs.extend(&new);
    let want = function(&[&m.x, &m.t], &outs)
        .backend(Backend::Cpu)
        .compile()
        .unwrap()
        .call(&[x.view(), t.view()])
        .unwrap();
    assert_close(&got[0], &want[0], 1e-5, 0.0, "loss");
    for (i, name) in ["w1", "b1", "w2", "b2"].iter().enumerate() {
        assert_close(&got[i + 1], &want[i + 1], 1e-5, 1e-6, name);
    }
}

/// `func` with its parameters fixed to the shapes of `inputs` (types inferred again).
fn specialize(func: &Func, inputs: &[Tensor]) -> Result<Func, String> {
    if func
        .params
        .iter()
        .all(|&p| func.ty(p).known_shape().is_some())
    {
        return Ok(func.clone());
    }
    let mut f = Func::new(func.name.clone());
    let mut map: HashMap<Value, Value> = HashMap::new();
    for (&p, t) in func.params.iter().zip(inputs) {
        let v = f.add_param(
            TensorType::fixed(t.dtype(), t.shape()),
            func.name_of(p).map(str::to_string),
        );
        map.insert(p, v);
    }
    for inst in &func.body {
        if !inst.regions.is_empty() {
            return Err("regions".into());
        }
        let args: Vec<Value> = inst.args.iter().map(|a| map[a]).collect();
        let results = f.push(inst.op.clone(), &args)?;
        for (o, n) in inst.results.iter().zip(results) {
            map.insert(*o, n);
        }
    }
    f.outputs = func.outputs.iter().map(|o| map[o]).collect();
    Ok(f)
}

#[test]
fn the_op_corpus_runs_ahead_of_time() {
    need_cc!();
    // Every file of the corpus with a run line, whatever pass it tests.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files: Vec<PathBuf> = Vec::new();
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "kir") {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut ran, mut refused, mut unspecialized) = (0, 0, 0);
    let mut failures = Vec::new();
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap();
        let Some(spec) = src.lines().find_map(|l| {
            let l = l.trim();
            l.strip_prefix("; run:")
                .or_else(|| l.strip_prefix("; run(opt):"))
                .map(str::trim)
        }) else {
            continue;
        };
        let func = parse(&path.display().to_string(), &src).unwrap().remove(0);
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let (ins, outs) = spec.split_once("->").unwrap();
        let inputs: Vec<Tensor> = split_top(ins)
            .iter()
            .zip(&func.params)
            .map(|(s, &p)| parse_literal(s, func.ty(p)).unwrap())
            .collect();
        let expect_error = outs.trim().starts_with("error:");
        // A function with unknown dims and regions is not specialized here (its lazy branches
        // may not even type-check for these shapes): the other backends' tests run it.
        let Ok(specialized) = specialize(&func, &inputs) else {
            unspecialized += 1;
            continue;
        };
        let compiled = Ok(specialized)
            .and_then(|f| kiln::aot::compile_func(&f, &AotOptions::default()).map(|a| (f, a)));
        let (f, art) = match (compiled, expect_error) {
            (Err(_), true) => {
                refused += 1;
                continue;
            }
            (Err(e), false) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
            (Ok(_), true) => {
                failures.push(format!("{name}: expected an error ({outs}), it compiled"));
                continue;
            }
            (Ok(x), false) => x,
        };
        let got = run_c(&art, &inputs, &name);
        // The JIT reads the same plan with the same generator: the same bits.
        let jitted = jit(&f, &inputs);
        for (i, (a, j)) in got.iter().zip(&jitted).enumerate() {
            if !same_bits(a, j) {
                failures.push(format!(
                    "{name}: output {i}: ahead of time {}, the JIT {}",
                    kiln::ir::text::literal(a),
                    kiln::ir::text::literal(j)
                ));
            }
        }
        let wants = split_top(outs);
        for (i, w) in wants.iter().enumerate() {
            let want = parse_literal(w, f.ty(f.outputs[i])).unwrap();
            if !common::close(&got[i], &want) {
                failures.push(format!(
                    "{name}: output {i}: expected {}, got {}",
                    kiln::ir::text::literal(&want),
                    kiln::ir::text::literal(&got[i])
                ));
            }
        }
        ran += 1;
    }
    println!(
        "{ran} corpus files ran ahead of time, {refused} refused as expected, \
         {unspecialized} with unknown dims and regions not specialized"
    );
    // Every op has code ahead of time: a file that should run and does not is a failure.
    assert!(ran >= 155, "only {ran} files ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_header_compiles_and_links_as_cplusplus() {
    if !have("c++") {
        eprintln!("skipped: no C++ compiler `c++` on PATH");
        return;
    }
    let f = parse1(
        "func @scale(%x: f64[3], %n: i64[]) -> (f64[3], bool[3]) {
  %c = cast %n {to = f64}
  %y = mul %x, %c
  %b = gt %y, %x
  return %y, %b
}",
    );
    let art = aot(&f);
    let dir = tmpdir("cxx");
    art.write(&dir.join("scale.o"), Some(&dir.join("scale.h")))
        .unwrap();
    std::fs::write(
        dir.join("main.cpp"),
        r#"#include "scale.h"
#include <cstdio>
int main() {
    const double x[3] = {1.0, -2.0, 3.0};
    const int64_t n = 2;
    double y[3];
    uint8_t b[3];
    static_assert(SCALE_OUT0_ELEMS == 3, "shape in the header");
    scale(x, &n, y, b);
    std::printf("%g %g %g %d %d %d\n", y[0], y[1], y[2], b[0], b[1], b[2]);
    return scale_scratch_bytes == 0 ? 0 : 1;
}
"#,
    )
    .unwrap();
    let out = Command::new("c++")
        .current_dir(&dir)
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "main.cpp",
            "scale.o",
            "-lm",
            "-o",
            "main",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(dir.join("main")).output().unwrap();
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "2 -4 6 1 0 1");
    // And as strict C (the header alone).
    if have("cc") {
        let out = Command::new("cc")
            .current_dir(&dir)
            .args([
                "-std=c99",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-x",
                "c",
                "scale.h",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A minimal ELF64 reader: checks that the file is a well-formed little-endian relocatable
/// object (header, sections inside the file, symbol and relocation tables consistent) and
/// returns its machine, its defined global functions and its undefined symbols.
fn read_elf(b: &[u8]) -> Result<(u16, Vec<String>, Vec<String>), String> {
    let u16_at = |o: usize| -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            b.get(o..o + 2).ok_or("truncated")?.try_into().unwrap(),
        ))
    };
    let u32_at = |o: usize| -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            b.get(o..o + 4).ok_or("truncated")?.try_into().unwrap(),
        ))
    };
    let u64_at = |o: usize| -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            b.get(o..o + 8).ok_or("truncated")?.try_into().unwrap(),
        ))
    };
    if b.get(..4) != Some(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    if u16_at(16)? != 1 {
        return Err("not a relocatable object".into());
    }
    let machine = u16_at(18)?;
    let (shoff, shentsize, shnum) = (
        u64_at(0x28)? as usize,
        u16_at(0x3a)? as usize,
        u16_at(0x3c)? as usize,
    );
    if shentsize != 64 {
        return Err(format!("section header size {shentsize}"));
    }
    struct Sec {
        ty: u32,
        flags: u64,
        off: usize,
        size: usize,
        link: usize,
        info: usize,
    }
    let mut secs = Vec::new();
    for i in 0..shnum {
        let h = shoff + i * 64;
        let s = Sec {
            ty: u32_at(h + 4)?,
            flags: u64_at(h + 8)?,
            off: u64_at(h + 24)? as usize,
            size: u64_at(h + 32)? as usize,
            link: u32_at(h + 40)? as usize,
            info: u32_at(h + 44)? as usize,
        };
        if s.ty != 8 && s.off + s.size > b.len() {
            return Err(format!("section {i} lies outside the file"));
        }
        secs.push(s);
    }
    let symtab = secs.iter().find(|s| s.ty == 2).ok_or("no symbol table")?;
    let strtab = secs.get(symtab.link).ok_or("bad string table link")?;
    let name_at = |o: usize| -> Result<String, String> {
        let bytes = b
            .get(strtab.off + o..strtab.off + strtab.size)
            .ok_or("bad name offset")?;
        let end = bytes
            .iter()
            .position(|&c| c == 0)
            .ok_or("unterminated name")?;
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    };
    let nsyms = symtab.size / 24;
    let (mut funcs, mut undefined) = (Vec::new(), Vec::new());
    for k in 1..nsyms {
        let e = symtab.off + k * 24;
        let name = name_at(u32_at(e)? as usize)?;
        let info = b[e + 4];
        let shndx = u16_at(e + 6)? as usize;
        let (value, size) = (u64_at(e + 8)? as usize, u64_at(e + 16)? as usize);
        if shndx == 0 {
            if !name.is_empty() {
                undefined.push(name);
            }
        } else if shndx < 0xff00 {
            let s = secs.get(shndx).ok_or(format!("{name}: bad section"))?;
            if value + size > s.size {
                return Err(format!("{name} lies outside its section"));
            }
            if info >> 4 == 1 && info & 0xf == 2 {
                if s.flags & 4 == 0 {
                    return Err(format!("{name} is not in an executable section"));
                }
                funcs.push(name);
            }
        }
    }
    for s in secs.iter().filter(|s| s.ty == 4) {
        let target = secs.get(s.info).ok_or("bad relocation target")?;
        for r in 0..s.size / 24 {
            let e = s.off + r * 24;
            let (off, info) = (u64_at(e)? as usize, u64_at(e + 8)?);
            if off >= target.size || (info >> 32) as usize >= nsyms {
                return Err(format!("relocation {r} is out of range"));
            }
        }
    }
    Ok((machine, funcs, undefined))
}

const LIBM: &[&str] = &[
    "expf",
    "exp",
    "logf",
    "log",
    "log1pf",
    "log1p",
    "expm1f",
    "expm1",
    "sinf",
    "sin",
    "cosf",
    "cos",
    "tanf",
    "tan",
    "tanhf",
    "tanh",
    "erff",
    "erf",
    "powf",
    "pow",
    "fmodf",
    "fmod",
    "floorf",
    "floor",
    "ceilf",
    "ceil",
    "nearbyintf",
    "nearbyint",
    "truncf",
    "trunc",
    "fmaf",
    "fma",
];

#[test]
fn objects_for_aarch64_and_x86_64_are_well_formed() {
    let f = parse1(
        "func @mix(%x: f32[8, 16], %w: f32[16, 4], %k: i32[8, 4]) -> (f32[8, 4], i32[8], f32[]) {
  %y = matmul %x, %w
  %t = tanh %y
  %three = const 3 : i32[]
  %m = mod %k, %three
  %s = sum %m {axes = [1]}
  %e = exp %t
  %z = mean %e
  return %t, %s, %z
}",
    );
    for (triple, machine) in [
        ("aarch64-unknown-linux-gnu", 183u16),
        ("x86_64-unknown-linux-gnu", 62),
    ] {
        let opts = AotOptions {
            target: Some(triple.into()),
            ..AotOptions::default()
        };
        let art = kiln::aot::compile_func(&f, &opts).unwrap();
        assert_eq!(art.target, triple);
        let (m, funcs, undefined) =
            read_elf(&art.object).unwrap_or_else(|e| panic!("{triple}: {e}"));
        assert_eq!(m, machine, "{triple}: e_machine");
        assert_eq!(
            funcs,
            ["mix"],
            "{triple}: the only global function is the entry point"
        );
        for u in &undefined {
            assert!(
                LIBM.contains(&u.as_str()),
                "{triple}: undefined symbol {u} is not from libm"
            );
        }
        assert!(art.header.contains(triple));
        if have("readelf") {
            let dir = tmpdir(triple);
            std::fs::write(dir.join("mix.o"), &art.object).unwrap();
            let out = Command::new("readelf")
                .args(["-h", "-s", "-r", "-W"])
                .arg(dir.join("mix.o"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                text.contains(if machine == 183 { "AArch64" } else { "X86-64" }),
                "{text}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// `ifelse` ahead of time: the condition chooses which branch's steps run, a branch may yield
/// an input or a value computed before it, branches nest, and each branch's buffers come from
/// the same scratch area. Both ways, against the interpreter.
#[test]
fn ifelse_runs_the_chosen_branch_ahead_of_time() {
    need_cc!();
    let src = "func @pick(%c: bool[], %d: bool[], %x: f32[3, 4], %y: f32[4]) -> (f32[3, 4], f32[3], f32[4]) {
  %s = sum %y {axes = [0], keepdims = false}
  %r, %m, %z = ifelse %c {
    %e = exp %x
    %t = add %e, %y
    %u = sum %t {axes = [1], keepdims = false}
    yield %t, %u, %y
  } else {
    %n = neg %x
    %q, %w = ifelse %d {
      %a = mul %n, %s
      %b = max %a {axes = [1], keepdims = false}
      yield %a, %b
    } else {
      %b2 = sum %n {axes = [1], keepdims = false}
      yield %n, %b2
    }
    %y2 = mul %y, %s
    yield %q, %w, %y2
  }
  return %r, %m, %z
}";
    let func = parse1(src);
    let art = aot(&func);
    assert!(
        art.scratch_bytes > 0,
        "the branches' buffers live in the scratch area"
    );
    let x = Tensor::F32(normal(5, &[3, 4], 1.0).into_dyn());
    let y = Tensor::F32(normal(6, &[4], 1.0).into_dyn());
    for (c, d) in [(true, false), (false, true), (false, false)] {
        let inputs = vec![
            Tensor::Bool(ndarray::arr0(c).into_dyn()),
            Tensor::Bool(ndarray::arr0(d).into_dyn()),
            x.clone(),
            y.clone(),
        ];
        let got = run_c(&art, &inputs, &format!("pick_{c}_{d}"));
        let want = {
            let opts = CompileOptions {
                backend: Some(Backend::Interp),
                ..CompileOptions::default()
            };
            let f = compile_func(func.clone(), &opts).unwrap();
            let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            f.call(&refs).unwrap()
        };
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(g, w, 1e-6, 1e-6, &format!("c={c} d={d} output {o}"));
        }
    }
}

/// Random ops ahead of time: every distribution and dtype, with and without a per-call
/// counter, gives the interpreter's numbers bit for bit (the same Philox stream and
/// transforms), over enough elements to cross many blocks.
#[test]
fn random_ops_give_the_interpreters_bits_ahead_of_time() {
    need_cc!();
    let src = "func @draw(%k: i64[], %x: f32[37, 5]) -> (f32[37, 5], f64[9, 4], f32[101], f64[33], bool[50], i32[50], f64[7], f32[37, 5]) {
  %u = uniform {seed = 7, shape = [37, 5], dtype = f32, low = -2.0, high = 3.0}
  %ux = add %u, %x
  %u64 = uniform %k {seed = 8, shape = [9, 4], dtype = f64, low = 0.5, high = 1.5}
  %n = normal %k {seed = 9, shape = [101], dtype = f32, mean = 1.0, std = 0.5}
  %n64 = normal {seed = 10, shape = [33], dtype = f64, mean = -1.0, std = 2.0}
  %b = bernoulli %k {seed = 11, shape = [50], dtype = bool, p = 0.3}
  %bi = bernoulli {seed = 12, shape = [50], dtype = i32, p = 0.7}
  %bf = bernoulli {seed = 13, shape = [7], dtype = f64, p = 0.5}
  return %ux, %u64, %n, %n64, %b, %bi, %bf, %u
}";
    let func = parse1(src);
    let art = aot(&func);
    for k in [0i64, 1, -5, 1 << 40] {
        let inputs = vec![
            Tensor::I64(ndarray::arr0(k).into_dyn()),
            Tensor::F32(normal(3, &[37, 5], 1.0).into_dyn()),
        ];
        let got = run_c(&art, &inputs, &format!("draw_{k}"));
        let opts = CompileOptions {
            backend: Some(Backend::Interp),
            ..CompileOptions::default()
        };
        let f = compile_func(func.clone(), &opts).unwrap();
        let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
        let want = f.call(&refs).unwrap();
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                same_bits(g, w),
                "counter {k}, output {o}: ahead of time {}, the interpreter {}",
                kiln::ir::text::literal(g),
                kiln::ir::text::literal(w)
            );
        }
    }
}

/// The dropout example (`examples/aot/dropout.kir`, `make -C examples/aot dropout`) draws the
/// interpreter's mask, per step, and passes the input through when not training.
#[test]
fn the_dropout_example_matches_the_interpreter() {
    need_cc!();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/aot/dropout.kir");
    let src = std::fs::read_to_string(&path).unwrap();
    let func = parse(&path.display().to_string(), &src).unwrap().remove(0);
    let art = aot(&func);
    let x = Tensor::F32(normal(9, &[4, 8], 1.0).into_dyn());
    let opts = CompileOptions {
        backend: Some(Backend::Interp),
        ..CompileOptions::default()
    };
    let reference = compile_func(func.clone(), &opts).unwrap();
    for (training, step) in [(true, 0i64), (true, 1), (false, 2)] {
        let inputs = vec![
            Tensor::Bool(ndarray::arr0(training).into_dyn()),
            Tensor::I64(ndarray::arr0(step).into_dyn()),
            x.clone(),
        ];
        let got = run_c(&art, &inputs, &format!("dropout_{step}"));
        let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
        let want = reference.call(&refs).unwrap();
        assert!(
            same_bits(&got[0], &want[0]),
            "step {step}: {} vs {}",
            kiln::ir::text::literal(&got[0]),
            kiln::ir::text::literal(&want[0])
        );
        if !training {
            assert!(same_bits(&got[0], &x), "inference passes the input through");
        }
    }
}

#[test]
fn the_embedding_example_returns_a_code_for_an_id_out_of_range() {
    need_cc!();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/aot");
    let src = std::fs::read_to_string(dir.join("embedding.kir")).unwrap();
    let art = aot(&parse1(&src));
    let tmp = tmpdir("embedding_example");
    art.write(&tmp.join("embedding.o"), Some(&tmp.join("embedding.h")))
        .unwrap();
    std::fs::copy(dir.join("embedding.c"), tmp.join("embedding.c")).unwrap();
    let cc = Command::new("cc")
        .current_dir(&tmp)
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(["embedding.c", "embedding.o", "-lm", "-o", "embedding"])
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let run = Command::new(tmp.join("embedding")).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        out.contains("with id 50: code 1: @embedding: %vectors = take: an index is out of range for axis 0 of size 50"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn unsupported_functions_are_errors_that_say_what() {
    let err = |src: &str| {
        kiln::aot::compile_func(&parse1(src), &AotOptions::default())
            .unwrap_err()
            .to_string()
    };
    let e = err("func @f(%x: f32[4, ?]) -> (f32[4, ?]) {\n  %y = exp %x\n  return %y\n}");
    assert!(
        e.contains("%x") && e.contains("dim 1") && e.contains("f32[4, ?]"),
        "{e}"
    );
    let e = kiln::aot::compile_func(
        &parse1("func @f(%x: f32[2]) -> (f32[2]) {\n  return %x\n}"),
        &AotOptions {
            target: Some("riscv64gc-unknown-linux-gnu".into()),
            ..AotOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("riscv64"), "{e}");
}

/// Runs the `kiln` tool with `args` (no dumps) and returns what it did.
fn kiln_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env_remove("KILN_DUMP")
        .output()
        .unwrap()
}

#[test]
fn kiln_aot_writes_the_object_and_header_or_nothing() {
    let dir = tmpdir("cli");
    let kir = dir.join("f.kir");
    std::fs::write(
        &kir,
        "func @f(%x: f32[5], %y: f32[5]) -> (f32[5], f32[]) {\n  %s = add %x, %y\n  %t = sum %s\n  return %s, %t\n}\n",
    )
    .unwrap();
    let (obj, hdr) = (dir.join("f.o"), dir.join("f.h"));
    let out = kiln_cli(&[
        "aot",
        kir.to_str().unwrap(),
        "-o",
        obj.to_str().unwrap(),
        "--header",
        hdr.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&hdr)
        .unwrap()
        .contains("int32_t f(const float *x, const float *y, float *out0, float *out1);"));
    assert_eq!(&std::fs::read(&obj).unwrap()[..4], b"\x7fELF");
    if have("cc") {
        std::fs::write(
            dir.join("main.c"),
            "#include <stdio.h>\n#include \"f.h\"\nint main(void) {\n  float x[5] = {1, 2, 3, 4, 5}, y[5] = {1, 1, 1, 1, 1}, s[5], t;\n  f(x, y, s, &t);\n  printf(\"%g %g\\n\", s[4], t);\n  return 0;\n}\n",
        )
        .unwrap();
        let cc = Command::new("cc")
            .current_dir(&dir)
            .args(["main.c", "f.o", "-lm", "-o", "main"])
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let run = Command::new(dir.join("main")).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), "6 20");
    }
    // An unknown dim: one line on stderr naming the value, exit code 1, no files.
    let bad = dir.join("g.kir");
    std::fs::write(
        &bad,
        "func @g(%x: f32[?]) -> (f32[?]) {\n  %y = exp %x\n  return %y\n}\n",
    )
    .unwrap();
    let (obj2, hdr2) = (dir.join("g.o"), dir.join("g.h"));
    let out = kiln_cli(&[
        "aot",
        bad.to_str().unwrap(),
        "-o",
        obj2.to_str().unwrap(),
        "--header",
        hdr2.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("g.kir") && err.contains("%x") && err.contains("dim 0"),
        "{err}"
    );
    assert!(!obj2.exists() && !hdr2.exists());
    // An unknown target.
    let out = kiln_cli(&[
        "aot",
        kir.to_str().unwrap(),
        "-o",
        obj2.to_str().unwrap(),
        "--target",
        "nonsense",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!obj2.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kiln aot --runtime`: the header says to link kiln's runtime library, a C program linked
/// with it multiplies there (an f64 and an f32 product, one with fewer columns than a tile),
/// and a target the library is not built for is refused in one line, writing nothing.
#[test]
fn kiln_aot_runtime_links_kilns_gemm() {
    let dir = tmpdir("cli_rt");
    let kir = dir.join("p.kir");
    std::fs::write(
        &kir,
        "func @p(%a: f64[3, 70], %b: f64[70, 2], %c: f32[2, 3], %d: f32[3, 20]) -> (f64[3, 2], f32[2, 20]) {\n  %x = matmul %a, %b\n  %y = matmul %c, %d\n  return %x, %y\n}\n",
    )
    .unwrap();
    let (obj, hdr) = (dir.join("p.o"), dir.join("p.h"));
    let (k, o, h) = (
        kir.to_str().unwrap(),
        obj.to_str().unwrap(),
        hdr.to_str().unwrap(),
    );
    let out = kiln_cli(&["aot", k, "-o", o, "--header", h, "--runtime"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = std::fs::read_to_string(&hdr).unwrap();
    assert!(
        header.contains("libkiln_rt.a")
            && header.contains("kiln_rt_gemm_f32, kiln_rt_gemm_f64")
            && header.contains("cargo build --release -p kiln-rt"),
        "{header}"
    );
    if have("cc") {
        // a[i][p] = (i + 1) * p, b[p][j] = j - p; c[i][p] = i + p, d[p][j] = p * j + 1.
        std::fs::write(
            dir.join("main.c"),
            "#include <stdio.h>\n#include \"p.h\"\nint main(void) {\n  static double a[3][70], b[70][2], x[3][2];\n  static float c[2][3], d[3][20], y[2][20];\n  for (int i = 0; i < 3; i++) for (int p = 0; p < 70; p++) a[i][p] = (i + 1) * p;\n  for (int p = 0; p < 70; p++) for (int j = 0; j < 2; j++) b[p][j] = j - p;\n  for (int i = 0; i < 2; i++) for (int p = 0; p < 3; p++) c[i][p] = i + p;\n  for (int p = 0; p < 3; p++) for (int j = 0; j < 20; j++) d[p][j] = p * j + 1;\n  if (p(&a[0][0], &b[0][0], &c[0][0], &d[0][0], &x[0][0], &y[0][0]) != 0) return 1;\n  printf(\"%g %g %g\\n\", x[2][1], x[0][0], y[1][19]);\n  return 0;\n}\n",
        )
        .unwrap();
        let cc = Command::new("cc")
            .current_dir(&dir)
            .args(["main.c", "p.o"])
            .arg(aot_lib::runtime_library().unwrap())
            .args(["-lm", "-lpthread", "-ldl", "-o", "main"])
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let run = Command::new(dir.join("main")).output().unwrap();
        // x[2][1] = sum_p 3p (1 - p), x[0][0] = -sum_p p^2, y[1][19] = sum_p (1 + p)(19p + 1).
        let sum = |f: &dyn Fn(f64) -> f64, n: usize| (0..n).map(|p| f(p as f64)).sum::<f64>();
        let want = format!(
            "{} {} {}",
            sum(&|p| 3.0 * p * (1.0 - p), 70),
            sum(&|p| -p * p, 70),
            sum(&|p| (1.0 + p) * (19.0 * p + 1.0), 3)
        );
        assert_eq!(String::from_utf8_lossy(&run.stdout).trim(), want);
    }
    let obj2 = dir.join("q.o");
    let out = kiln_cli(&[
        "aot",
        k,
        "-o",
        obj2.to_str().unwrap(),
        "--runtime",
        "--target",
        "aarch64-unknown-linux-gnu",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("x86_64") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert!(!obj2.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn float_sums_have_the_references_bits() {
    need_cc!();
    // Row lengths on each side of the pairwise sum's leaf and split sizes.
    for n in [3usize, 8, 61, 128, 129, 1000, 4099] {
        let f = parse1(&format!(
            "func @s(%x: f32[3, {n}], %y: f64[{n}]) -> (f32[3], f64[], f32[3]) {{
  %a = sum %x {{axes = [1]}}
  %b = sum %y
  %c = mean %x {{axes = [1]}}
  return %a, %b, %c
}}"
        ));
        let inputs = vec![
            Tensor::F32(normal(7, &[3, n], 1.0)),
            Tensor::F64(normal(8, &[n], 1.0).mapv(|v| v as f64 * 1.1)),
        ];
        let got = run_c(&aot(&f), &inputs, &format!("sums{n}"));
        let want = {
            let opts = CompileOptions {
                backend: Some(Backend::Interp),
                ..CompileOptions::default()
            };
            let g = compile_func(f.clone(), &opts).unwrap();
            let refs: Vec<kiln::TensorRef> = inputs.iter().map(|t| t.view()).collect();
            g.call(&refs).unwrap()
        };
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(a.bit_eq(b), "n {n}, output {k}: {a:?} vs {b:?}");
        }
    }
}
