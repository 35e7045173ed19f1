//! Row groups on the CPU backend: row-local chains of maps and reductions (softmax,
//! logsumexp, normalizations) run block by block of rows. The results must equal the
//! reference interpreter's, which runs every step over the whole array, and the CPU plan must
//! show the group (`rows N ... {`) in its schedule dump.

use kiln::{Backend, DType, Tensor};

mod common;

fn compile(src: &str, backend: Backend, dump_dir: Option<&std::path::Path>) -> kiln::Function {
    common::compile_text(src, "r", backend, dump_dir)
}

fn values(dtype: kiln::DType, shape: &[usize], seed: u64) -> Tensor {
    common::normal_values(dtype, shape, seed, 3.0)
}

/// Within a few ulps for floats (the interpreter calls the C library's exp and log), exact
/// otherwise.
fn close(a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape());
    assert_eq!(a.dtype(), b.dtype());
    let tol = match a.dtype() {
        DType::F32 => 8.0 * f32::EPSILON as f64,
        DType::F64 => 8.0 * f64::EPSILON,
        _ => 0.0,
    };
    for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
        assert!(
            x == &y || (x - y).abs() <= tol * y.abs().max(1e-30),
            "{x} vs {y}"
        );
    }
}

/// Runs `src` on both backends (the CPU one twice, the second time on recycled buffers and
/// into the caller's buffers) and returns the CPU schedule.
fn agree(src: &str, inputs: &[Tensor]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "kiln-rows-{}-{}",
        std::process::id(),
        src.len() + inputs.len()
    ));
    let cpu = compile(src, Backend::Cpu, Some(&dir));
    let interp = compile(src, Backend::Interp, None);
    let views: Vec<_> = inputs.iter().map(Tensor::view).collect();
    let want = interp.call(&views).unwrap();
    let mut got = cpu.call(&views).unwrap();
    for (g, w) in got.iter().zip(&want) {
        close(g, w);
    }
    cpu.call_into(&views, &mut got).unwrap();
    for (g, w) in got.iter().zip(&want) {
        close(g, w);
    }
    let schedule = std::fs::read_to_string(dir.join("r.05.schedule.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    schedule
}

#[test]
fn softmax_runs_as_one_row_group() {
    let src = "func @r(%x: f32[1000, 300]) -> (f32[1000, 300]) {
       %m = max %x {axes = [1], keepdims = true}
       %d = sub %x, %m
       %e = exp %d
       %s = sum %e {axes = [1], keepdims = true}
       %y = div %e, %s
       return %y
     }";
    let schedule = agree(src, &[values(DType::F32, &[1000, 300], 1)]);
    assert!(schedule.contains("rows 1000 %0 {"), "{schedule}");
    // Nothing but the group at the top level.
    assert_eq!(
        schedule.lines().filter(|l| l.starts_with("  %")).count(),
        1,
        "{schedule}"
    );
}

#[test]
fn intermediates_read_after_the_group_are_written_whole() {
    // `%m` and `%s` are outputs too; a bias `%b` is read whole by every block; f64.
    let src = "func @r(%x: f64[777, 129], %b: f64[129]) -> (f64[777, 1], f64[777], f64[777, 129]) {
       %xb = add %x, %b
       %m = max %xb {axes = [1], keepdims = true}
       %d = sub %xb, %m
       %e = exp %d
       %s = sum %e {axes = [1]}
       %y = mul %d, %m
       return %m, %s, %y
     }";
    let schedule = agree(
        src,
        &[
            values(DType::F64, &[777, 129], 2),
            values(DType::F64, &[129], 3),
        ],
    );
    assert!(schedule.contains("rows 777"), "{schedule}");
}

#[test]
fn three_dim_rows_and_integer_sums() {
    let src = "func @r(%x: i32[600, 8, 20]) -> (i32[600, 1, 20], i32[600, 8, 20]) {
       %a = abs %x
       %s = sum %a {axes = [1], keepdims = true}
       %y = sub %a, %s
       return %s, %y
     }";
    let schedule = agree(src, &[values(DType::I32, &[600, 8, 20], 4)]);
    assert!(schedule.contains("rows 600"), "{schedule}");
}

#[test]
fn steps_that_mix_rows_stay_out_of_groups() {
    // A reduction over axis 0 mixes rows, and a row-sum without keepdims ([R]) would be
    // aligned with the last axis by broadcasting: neither may join a group.
    let src = "func @r(%x: f32[300, 300]) -> (f32[300, 300], f32[300, 300]) {
       %c = sum %x {axes = [0], keepdims = true}
       %y = sub %x, %c
       %s = sum %x {axes = [1]}
       %z = sub %x, %s
       return %y, %z
     }";
    let schedule = agree(src, &[values(DType::F32, &[300, 300], 5)]);
    // Both stay top-level steps (two spaces in); what is row-local between them may group.
    let top: Vec<&str> = schedule.lines().filter(|l| l.starts_with("  %")).collect();
    assert!(
        top.iter().any(|l| l.contains("reduce sum axes [0]")),
        "{schedule}"
    );
    assert!(
        top.iter().any(|l| l.contains("= map sub %0, %3")),
        "{schedule}"
    );
}

#[test]
fn logsumexp_of_a_large_batch() {
    let src = "func @r(%x: f32[2000, 500]) -> (f32[2000]) {
       %m = max %x {axes = [1], keepdims = true}
       %d = sub %x, %m
       %e = exp %d
       %s = sum %e {axes = [1]}
       %l = log %s
       %m1 = reshape %m {shape = [2000]}
       %y = add %l, %m1
       return %y
     }";
    let schedule = agree(src, &[values(DType::F32, &[2000, 500], 6)]);
    assert!(schedule.contains("rows 2000"), "{schedule}");
}

/// A column broadcast that only elementwise steps read (a map and a fused reduction) is not
/// copied: the kernels broadcast it themselves. The results are the reference's, which
/// copies it. The second broadcast has a transpose as its reader and stays.
#[test]
fn broadcasts_read_only_by_elementwise_steps_are_not_copied() {
    let src = "func @r(%x: f32[500, 40], %c: f32[500, 1]) -> (f32[500, 40], f32[40, 500]) {
       %b = broadcast_to %c {shape = [500, 40]}
       %p = mul %x, %b
       %s = sum %p {axes = [1], keepdims = true}
       %q = div %b, %s
       %y = sub %x, %q
       %k = broadcast_to %s {shape = [500, 40]}
       %t = transpose %k {perm = [1, 0]}
       return %y, %t
     }";
    let inputs = [
        values(DType::F32, &[500, 40], 1),
        values(DType::F32, &[500, 1], 2),
    ];
    let schedule = agree(src, &inputs);
    assert_eq!(schedule.matches("broadcast_to").count(), 1, "{schedule}");
    assert!(schedule.contains("view broadcast_to %"), "{schedule}");
}

/// The masked softmax of attention scores: fusion copies `x * c + mask` into the row max's
/// map and into the exponential; inside the group the exponential reads the first map's
/// block instead (`lower::row_reuse`), and the results are the reference's. With two rows
/// (one block in release builds, and in debug builds too few to split) the members run one by
/// one, so each freed value must outlive its new last reader.
#[test]
fn members_read_what_an_earlier_map_member_computed_instead_of_recomputing_it() {
    for rows in [2usize, 3, 500] {
        let src = format!(
            "func @r(%x: f32[{rows}, 64], %mask: f32[64]) -> (f32[{rows}, 64]) {{
               %c = full {{value = 0.17, shape = [], dtype = f32}}
               %s = mul %x, %c
               %z = add %s, %mask
               %m = max %z {{axes = [1], keepdims = true}}
               %d = sub %z, %m
               %e = exp %d
               %t = sum %e {{axes = [1], keepdims = true}}
               %y = div %e, %t
               return %y
             }}"
        );
        let inputs = [
            values(DType::F32, &[rows, 64], 7),
            values(DType::F32, &[64], 8),
        ];
        let schedule = agree(&src, &inputs);
        assert!(schedule.contains(&format!("rows {rows} ")), "{schedule}");
        let exp = (schedule.lines())
            .find(|l| l.contains("exp "))
            .unwrap_or_else(|| panic!("no exponential in {schedule}"));
        // The exponential reads the scaled, masked scores as a member's result: no multiply.
        assert!(
            exp.contains("inner 0") && !exp.contains("mul"),
            "{schedule}"
        );
    }
}

/// A log-softmax of `x + b`: the exponentials' sum and the result both read the sum's block
/// (`x + b`) instead of adding again; in f64, and with the sum's prologue then only `exp(z -
/// m)`.
#[test]
fn log_softmax_members_read_the_biased_block() {
    let src = "func @r(%x: f64[301, 33], %b: f64[33]) -> (f64[301, 33]) {
       %z = add %x, %b
       %m = max %z {axes = [1], keepdims = true}
       %d = sub %z, %m
       %e = exp %d
       %s = sum %e {axes = [1], keepdims = true}
       %l = log %s
       %y = sub %d, %l
       return %y
     }";
    let inputs = [
        values(DType::F64, &[301, 33], 9),
        values(DType::F64, &[33], 10),
    ];
    let schedule = agree(src, &inputs);
    let members: Vec<&str> = (schedule.lines())
        .filter(|l| l.starts_with("    %"))
        .collect();
    // Only the first member adds the bias.
    assert_eq!(
        members.iter().filter(|l| l.contains("add ")).count(),
        1,
        "{schedule}"
    );
    assert!(
        members
            .iter()
            .any(|l| l.contains("reduce sum") && l.contains("inner 0")),
        "{schedule}"
    );
}
