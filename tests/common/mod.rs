//! Helpers shared by the file-test harness and the CLI tests.
#![allow(dead_code)]

use kiln::Tensor;

/// Splits `s` at commas outside brackets.
pub fn split_top(s: &str) -> Vec<String> {
    let (mut depth, mut cur, mut out) = (0i32, String::new(), Vec::new());
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// Whether `got` matches `want`: exact for integers and bools; for floats within a few units of
/// the last place the literal was written with, NaN matching NaN.
pub fn close(got: &Tensor, want: &Tensor) -> bool {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return false;
    }
    let tol = match got.dtype() {
        kiln::DType::F32 => 4e-6,
        kiln::DType::F64 => 1e-12,
        _ => 0.0,
    };
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .all(|(&g, w)| {
            (g.is_nan() && w.is_nan())
                || g == w
                || (g.is_finite() && w.is_finite() && (g - w).abs() <= tol * w.abs().max(1e-6))
        })
}
