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
