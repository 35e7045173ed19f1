//! Matrix products on the CPU backend: transposes that only a matmul reads fold into the GEMM
//! step (the operand is read through swapped strides), and the results equal the reference
//! interpreter's (which keeps every transpose a step of its own) bit for bit, since both run
//! the same GEMM.

use kiln::{Backend, Tensor};
use ndarray::{ArrayD, IxDyn};

mod common;

fn compile(src: &str, backend: Backend, dump_dir: Option<&std::path::Path>) -> kiln::Function {
    common::compile_text(src, "g", backend, dump_dir)
}

fn values(dtype: kiln::DType, shape: &[usize], seed: u64) -> Tensor {
    common::normal_values(dtype, shape, seed, 4.0)
}

/// Runs `src` on both backends and checks the outputs are equal bit for bit, and that the CPU
/// plan has `folded` matmuls with a transposed operand.
fn agree(src: &str, inputs: &[Tensor], folded: usize) {
    let dir = std::env::temp_dir().join(format!("kiln-gemm-{}-{}", std::process::id(), src.len()));
    let cpu = compile(src, Backend::Cpu, Some(&dir));
    let interp = compile(src, Backend::Interp, None);
    let views: Vec<_> = inputs.iter().map(Tensor::view).collect();
    let (a, b) = (cpu.call(&views).unwrap(), interp.call(&views).unwrap());
    // Twice: the second call runs on recycled buffers.
    let a2 = cpu.call(&views).unwrap();
    for ((x, y), z) in a.iter().zip(&b).zip(&a2) {
        assert_eq!(x.shape(), y.shape());
        assert_eq!(x.to_f64_vec(), y.to_f64_vec(), "cpu vs interp:\n{src}");
        assert_eq!(z.to_f64_vec(), y.to_f64_vec(), "second call:\n{src}");
    }
    let schedule = std::fs::read_to_string(dir.join("g.05.schedule.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got = schedule.lines().filter(|l| l.contains("^T")).count();
    assert_eq!(got, folded, "{schedule}");
}

#[test]
fn transposed_operands_fold_for_every_dtype() {
    for (dt, name) in [
        (kiln::DType::F32, "f32"),
        (kiln::DType::F64, "f64"),
        (kiln::DType::I32, "i32"),
        (kiln::DType::I64, "i64"),
    ] {
        let src = format!(
            "func @g(%x: {name}[70, 40], %w: {name}[70, 30], %v: {name}[50, 40]) -> ({name}[40, 30], {name}[70, 50]) {{
               %xt = transpose %x {{perm = [1, 0]}}
               %a = matmul %xt, %w
               %vt = transpose %v {{perm = [1, 0]}}
               %b = matmul %x, %vt
               return %a, %b
             }}"
        );
        let inputs = [
            values(dt, &[70, 40], 1),
            values(dt, &[70, 30], 2),
            values(dt, &[50, 40], 3),
        ];
        agree(&src, &inputs, 2);
    }
}

#[test]
fn batched_both_sides_and_broadcast_batches() {
    let src = "func @g(%x: f32[3, 20, 10], %y: f32[1, 30, 20]) -> (f32[3, 10, 30]) {
       %xt = transpose %x {perm = [0, 2, 1]}
       %yt = transpose %y {perm = [0, 2, 1]}
       %a = matmul %xt, %yt
       return %a
     }";
    let inputs = [
        values(kiln::DType::F32, &[3, 20, 10], 4),
        values(kiln::DType::F32, &[1, 30, 20], 5),
    ];
    agree(src, &inputs, 1);
}

#[test]
fn transposes_with_other_readers_or_in_outputs_stay() {
    // `%xt` is also an output, `%wt` is read by an add too, and the transpose inside the
    // branch folds there.
    let src = "func @g(%x: f32[16, 8], %w: f32[16, 8], %c: bool[], %z: f32[16, 8]) -> (f32[8, 8], f32[8, 16], f32[8, 8]) {
       %xt = transpose %x {perm = [1, 0]}
       %a = matmul %xt, %w
       %wt = transpose %w {perm = [1, 0]}
       %s = add %wt, %wt
       %b = matmul %s, %x
       %y = ifelse %c {
         %ut = transpose %z {perm = [1, 0]}
         %p = matmul %ut, %x
         yield %p
       } else {
         yield %b
       }
       return %a, %xt, %y
     }";
    for c in [true, false] {
        let inputs = [
            values(kiln::DType::F32, &[16, 8], 6),
            values(kiln::DType::F32, &[16, 8], 7),
            Tensor::Bool(ArrayD::from_elem(IxDyn(&[]), c)),
            values(kiln::DType::F32, &[16, 8], 8),
        ];
        agree(src, &inputs, 1);
    }
}

/// A two-layer linear step with SGD updates of both weights, one written `w - g * lr`
/// and the other `v + g * -lr`, compiled for `backend` (schedule dumped into `dump_dir`).
fn sgd_step(
    backend: Backend,
    dtype: kiln::DType,
    batch: usize,
    dump_dir: Option<&std::path::Path>,
) -> (kiln::Function, Vec<kiln::Var>) {
    let g = kiln::Graph::new();
    let x = g.input("x", dtype, [Some(batch as i64), Some(40)]);
    let y = g.input("y", dtype, [Some(batch as i64), Some(30)]);
    let w = g.shared("w", values(dtype, &[40, 30], 1));
    let v = g.shared("v", values(dtype, &[30, 30], 2));
    // Products only, so that the reference's and the CPU backend's gradients have the same
    // bits (the two backends may differ in the last bit elsewhere, within the contract).
    let pred = x.matmul(&w).matmul(&v);
    let loss = (&pred * &y).sum(None, false);
    let grads = kiln::grad(&loss, &[&w, &v]).unwrap();
    let mut opts = kiln::CompileOptions {
        backend: Some(backend),
        ..Default::default()
    };
    if let Some(dir) = dump_dir {
        opts.dump = kiln::dump::DumpOptions {
            stages: vec!["schedule".into()],
            dir: Some(dir.to_path_buf()),
            ..Default::default()
        };
    }
    let f = kiln::function(&[&x, &y], &[&loss])
        .update(&w, &w - &grads[0] * 0.05)
        .update(&v, &v + &grads[1] * -0.05)
        .options(opts)
        .compile()
        .unwrap();
    (f, vec![w, v])
}

/// The SGD updates fuse into their weight-gradient products on the CPU backend (one GEMM
/// update step each, writing the weights in place), and the weights equal the reference's
/// (separate product and update steps) bit for bit after every call: f32 and f64, a batch of
/// one k chunk and one of two (300 > 256, the earlier chunk summed in the scratch buffer).
#[test]
fn sgd_updates_fuse_into_the_gemm_with_the_reference_bits() {
    for (dtype, batch) in [(kiln::f32, 64), (kiln::f32, 300), (kiln::f64, 300)] {
        let dir =
            std::env::temp_dir().join(format!("kiln-gemm-update-{}-{batch}", std::process::id()));
        let (cpu, cpu_params) = sgd_step(Backend::Cpu, dtype, batch, Some(&dir));
        let (interp, interp_params) = sgd_step(Backend::Interp, dtype, batch, None);
        let schedule = std::fs::read_to_string(dir.join("f.05.schedule.txt")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let fused: Vec<&str> = schedule
            .lines()
            .filter(|l| l.contains(" update "))
            .collect();
        assert_eq!(fused.len(), 2, "{schedule}");
        assert!(fused.iter().all(|l| l.contains("inplace 2")), "{schedule}");
        // `v + g * -0.05` is canonicalized to `v - g * 0.05` before it gets here.
        assert!(fused.iter().all(|l| l.contains("scale 0.05")), "{schedule}");
        let (xs, ys) = (
            values(dtype, &[batch, 40], 3),
            values(dtype, &[batch, 30], 4),
        );
        for call in 0..3 {
            let a = cpu.call(&[xs.view(), ys.view()]).unwrap();
            let b = interp.call(&[xs.view(), ys.view()]).unwrap();
            // The loss is a mean, which the backends may sum in other orders.
            let (la, lb) = (a[0].to_f64_vec()[0], b[0].to_f64_vec()[0]);
            assert!(
                (la - lb).abs() <= 1e-5 * lb.abs(),
                "loss, call {call}: {la} vs {lb}"
            );
            for (p, q) in cpu_params.iter().zip(&interp_params) {
                let (p, q) = (p.value().unwrap(), q.value().unwrap());
                let (p, q) = (p.to_f64_vec(), q.to_f64_vec());
                let differ = p.iter().zip(&q).filter(|(x, y)| x.to_bits() != y.to_bits());
                let differ: Vec<_> = differ.take(3).collect();
                assert!(
                    differ.is_empty(),
                    "{dtype} batch {batch}, call {call}: {differ:?}"
                );
            }
        }
    }
}

/// Where the product has another reader (here the gradient is also an output), or the step
/// is not `w -/+ g * c`, nothing fuses, and the results are still the reference's.
#[test]
fn products_with_other_readers_or_other_steps_do_not_fuse() {
    let src = "func @g(%x: f32[8, 5], %d: f32[8, 4], %w: f32[5, 4], %v: f32[5, 4]) -> (f32[5, 4], f32[5, 4], f32[5, 4]) {
       %xt = transpose %x {perm = [1, 0]}
       %gw = matmul %xt, %d
       %c = const 0.5 : f32[]
       %s = mul %gw, %c
       %w2 = sub %w, %s
       %gv = matmul %xt, %d
       %v2 = mul %v, %gv
       return %w2, %gw, %v2
     }";
    let inputs = [
        values(kiln::f32, &[8, 5], 1),
        values(kiln::f32, &[8, 4], 2),
        values(kiln::f32, &[5, 4], 3),
        values(kiln::f32, &[5, 4], 4),
    ];
    let dir = std::env::temp_dir().join(format!("kiln-gemm-nofuse-{}", std::process::id()));
    let cpu = compile(src, Backend::Cpu, Some(&dir));
    let schedule = std::fs::read_to_string(dir.join("g.05.schedule.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!schedule.contains(" update "), "{schedule}");
    let interp = compile(src, Backend::Interp, None);
    let views: Vec<_> = inputs.iter().map(Tensor::view).collect();
    let (a, b) = (cpu.call(&views).unwrap(), interp.call(&views).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.to_f64_vec(), y.to_f64_vec());
    }
}
