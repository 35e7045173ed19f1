//! Gradient steps into the GEMM (Theano's `gemm_inplace`): a `gemm` step whose product only
//! a map `w - g * c` (or `w + g * c`) reads, where the map may overwrite `w`, becomes one
//! step that subtracts the scaled product from `w` in place (`gemm::gemm_update`), with the
//! bits of the two steps. An SGD update no longer writes its gradient out and reads it back:
//! in W5 that was a pass over each weight matrix and its gradient (the 784 x 512 one took
//! about 0.1 ms of a 5.6 ms step).
//!
//! The fused step takes the gemm's place in the plan. That is sound when no step between the
//! two reads `w` (it would see the new value) and the map was the product's only reader; the
//! map's own arguments are then read last by the fused step, and the frees move with it.
//! Where `w` is a parameter (a shared variable's old value) and a step between the two may
//! fail, the fused step takes the map's place instead: a call that fails must leave its
//! shared variables as they were (`rewrite::inplace` ordered the plan so).

use super::{Kernel, Step};
use crate::ir::scalar::{ScalarOp, ScalarProgram};
use crate::ir::{BinaryOp, DType, Func, Value};

/// `result = w - product * scale`, `w` the step's third argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmUpdate {
    /// What the product is multiplied by before it is subtracted: `c` for `w - g * c`, `-c`
    /// for `w + g * c`.
    pub scale: f64,
}

/// `steps` with each gemm step whose product feeds only an update map fused with it.
pub(super) fn fuse(func: &Func, mut steps: Vec<Step>) -> Vec<Step> {
    let mut i = 0;
    while i < steps.len() {
        if let Some((j, step)) = fusion_at(func, &steps, i) {
            let (a, b, w) = (step.args[0], step.args[1], step.args[2]);
            let between = &steps[i + 1..j];
            if func.params.contains(&w) && between.iter().any(|s| s.may_fail(func)) {
                // At the map's place the product's operands must still be there: no step in
                // between may free them or overwrite them in place. Otherwise the two steps
                // stay apart.
                let keeps = |v: Value| {
                    between
                        .iter()
                        .all(|s| !s.frees.contains(&v) && s.inplace.map(|k| s.args[k]) != Some(v))
                };
                if keeps(a) && keeps(b) {
                    steps[j] = step;
                    steps.remove(i);
                    continue;
                }
            } else {
                steps[i] = step;
                steps.remove(j);
            }
        }
        i += 1;
    }
    steps
}

/// The fused step replacing gemm step `i` and the map step it returns the index of, if any.
fn fusion_at(func: &Func, steps: &[Step], i: usize) -> Option<(usize, Step)> {
    let gemm = &steps[i];
    let Kernel::Gemm {
        transposed,
        update: None,
    } = gemm.kernel
    else {
        return None;
    };
    let (&[a, b], &[g]) = (gemm.args.as_slice(), gemm.results.as_slice()) else {
        return None;
    };
    // The product's only reader, where it is read for the last time.
    let j = (i + 1..steps.len()).find(|&j| steps[j].reads().contains(&g))?;
    let map = &steps[j];
    if !map.frees.contains(&g) || (j + 1..steps.len()).any(|k| steps[k].reads().contains(&g)) {
        return None;
    }
    let Kernel::Map { program, .. } = &map.kernel else {
        return None;
    };
    let (&[x, y], &[r]) = (map.args.as_slice(), map.results.as_slice()) else {
        return None;
    };
    let (gk, w) = if x == g { (0, y) } else { (1, x) };
    if w == g || map.inplace != Some(1 - gk) || w == a || w == b {
        return None;
    }
    let scale = update_scale(program, gk)?;
    // Floats of one type and one known 2-D shape; `w` read by no step in between.
    let ty = func.ty(g);
    let fits = |v: Value| func.ty(v) == ty;
    let float = matches!(ty.dtype, DType::F32 | DType::F64);
    let two_d = [a, b].iter().all(|&v| func.ty(v).rank() == 2) && ty.rank() == 2;
    if !(float && two_d && ty.known_shape().is_some() && fits(w) && fits(r)) {
        return None;
    }
    if steps[i + 1..j].iter().any(|s| s.reads().contains(&w)) {
        return None;
    }
    let mut frees: Vec<Value> = gemm.frees.clone();
    for &v in &map.frees {
        if v != g && !frees.contains(&v) {
            frees.push(v);
        }
    }
    let step = Step {
        id: super::StepId::UNNUMBERED,
        kernel: Kernel::Gemm {
            transposed,
            update: Some(GemmUpdate { scale }),
        },
        op: gemm.op.clone(),
        args: vec![a, b, w],
        results: vec![r],
        inplace: Some(2),
        frees,
        stretch: gemm.stretch.clone(),
    };
    Some((j, step))
}

/// The `scale` of a program `w - g * c` (`w + g * c`: `-c`) where `g` is input `gk` and `w`
/// the other, every instruction of one float type.
fn update_scale(p: &ScalarProgram, gk: usize) -> Option<f64> {
    let [out] = p.outputs.as_slice() else {
        return None;
    };
    let dtype = p.insts.get(*out)?.dtype;
    if p.insts.iter().any(|i| i.dtype != dtype) {
        return None;
    }
    let op = |r: usize| &p.insts[r].op;
    let args = |r: usize| p.insts[r].args.as_slice();
    let is_input = |r: usize, k: usize| *op(r) == ScalarOp::Input(k);
    // `g * c` or `c * g`: c.
    let scaled_g = |r: usize| -> Option<f64> {
        let (ScalarOp::Binary(BinaryOp::Mul), &[u, v]) = (op(r), args(r)) else {
            return None;
        };
        match (op(u), op(v)) {
            (ScalarOp::Const(c), _) if is_input(v, gk) => Some(c.0),
            (_, ScalarOp::Const(c)) if is_input(u, gk) => Some(c.0),
            _ => None,
        }
    };
    let wk = 1 - gk;
    match (op(*out), args(*out)) {
        (ScalarOp::Binary(BinaryOp::Sub), &[u, v]) if is_input(u, wk) => scaled_g(v),
        (ScalarOp::Binary(BinaryOp::Add), &[u, v]) if is_input(u, wk) => scaled_g(v).map(|c| -c),
        (ScalarOp::Binary(BinaryOp::Add), &[u, v]) if is_input(v, wk) => scaled_g(u).map(|c| -c),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lower_with, LowerOptions};

    /// The plan's text with gemm updates fused (and transposes folded, as the CPU backend
    /// lowers).
    fn schedule(body: &str) -> String {
        let src = format!(
            "func @f(%x: f32[8, 5], %d: f32[8, 4], %w: f32[5, 4]) -> (f32[5, 4], f32[5, 4]) {{\n{body}\n}}"
        );
        let f = crate::ir::text::parse("t.kir", &src).unwrap().remove(0);
        let opts = LowerOptions {
            fold_transposes: true,
            row_groups: false,
            gemm_updates: true,
            fold_broadcasts: false,
        };
        lower_with(&f, opts).to_string()
    }

    const PRODUCT: &str = "%xt = transpose %x {perm = [1, 0]}\n%g = matmul %xt, %d\n";

    /// A fused elementwise step over `args` with the scalar program `program`.
    fn composite(args: &str, program: &str, inplace: Option<usize>) -> String {
        let mark = inplace
            .map(|k| format!(", inplace = {k}"))
            .unwrap_or_default();
        format!("%u = composite \"fused\" {args} {{program = \"{program}\"{mark}}} : f32[5, 4]\n")
    }

    const W_MINUS_G_C: &str =
        "%0 = const 0.5 : f32; %1 = input 0 : f32; %2 = mul %1, %0 : f32; %3 = input 1 : f32; %4 = sub %3, %2 : f32; return %4";

    #[test]
    fn sub_and_add_of_a_scaled_product_fuse_in_place() {
        let plus = "%0 = const 0.5 : f32; %1 = input 0 : f32; %2 = mul %0, %1 : f32; %3 = input 1 : f32; %4 = add %3, %2 : f32; return %4";
        let plus_swapped = "%0 = const 0.5 : f32; %1 = input 1 : f32; %2 = mul %1, %0 : f32; %3 = input 0 : f32; %4 = add %2, %3 : f32; return %4";
        for (step, scale) in [
            (composite("%g, %w", W_MINUS_G_C, Some(1)), "scale 0.5"),
            (composite("%g, %w", plus, Some(1)), "scale -0.5"),
            (composite("%w, %g", plus_swapped, Some(0)), "scale -0.5"),
        ] {
            let text = schedule(&format!("{PRODUCT}{step}return %u, %u"));
            let want = format!("gemm %0^T, %1 update %2 {scale} inplace 2");
            assert!(text.contains(&want), "{text}");
            assert!(!text.contains("= map"), "{text}");
        }
    }

    #[test]
    fn no_fusion_without_the_mark_another_reader_or_with_w_read_between() {
        let w_g_c = "%0 = const 0.5 : f32; %1 = input 0 : f32; %2 = mul %1, %0 : f32; %3 = input 1 : f32; %4 = sub %2, %3 : f32; return %4";
        let g_g = "%0 = input 0 : f32; %1 = mul %0, %0 : f32; %2 = input 1 : f32; %3 = sub %2, %1 : f32; return %3";
        let cases = [
            // Not marked in place: `w` must survive.
            format!("{}return %u, %w", composite("%g, %w", W_MINUS_G_C, None)),
            // The product is also an output.
            format!("{}return %u, %g", composite("%g, %w", W_MINUS_G_C, Some(1))),
            // `w` is read between the product and the step.
            format!(
                "%r = neg %w\n{}return %u, %r",
                composite("%g, %w", W_MINUS_G_C, Some(1))
            ),
            // `g * c - w`: the product is not what is subtracted.
            format!("{}return %u, %u", composite("%g, %w", w_g_c, Some(1))),
            // `w - g * g`: not a scaled product.
            format!("{}return %u, %u", composite("%g, %w", g_g, Some(1))),
        ];
        for case in cases {
            let text = schedule(&format!("{PRODUCT}{case}"));
            assert!(text.contains("gemm"), "{case}\n{text}");
            assert!(!text.contains(" update "), "{case}\n{text}");
        }
    }
}
