//! Work moved out of `scan` loops by the optimizer (`rewrite::scan_pushout`): random recurrent
//! layers (products of the slices by invariant matrices, carries that sum products and rows
//! over the steps, products of what the body stacks) of random sizes (no rows included),
//! lengths (none included), directions and dtypes, with their leading dims known or not, give with the
//! optimizer what they give without it on every backend: the products that move keep their
//! bits, the sums over the steps agree to rounding (integers exactly). The loops of the
//! optimized function hold what the rewrites leave (one product per step), so a rewrite that
//! stops firing fails here too. An RNN's gradients through the pushed-out scans match finite
//! differences.

mod common;
use common::{backends_with_gpu_host, normal_values, Rng};
use kiln::{function, grad, scan, scan_reverse, Graph, Tensor};

/// Counts the `matmul`s inside the scan bodies of `body`, one entry per scan.
fn products_per_loop(body: &[kiln::ir::Inst]) -> Vec<usize> {
    fn count(body: &[kiln::ir::Inst]) -> usize {
        (body.iter())
            .map(|i| {
                usize::from(i.op == kiln::ir::Op::MatMul)
                    + i.regions.iter().map(|r| count(&r.body)).sum::<usize>()
            })
            .sum()
    }
    let mut out = Vec::new();
    for i in body {
        if matches!(i.op, kiln::ir::Op::Scan { .. }) {
            out.push(i.regions.iter().map(|r| count(&r.body)).sum());
        }
        for r in &i.regions {
            out.extend(products_per_loop(&r.body));
        }
    }
    out
}

/// One random recurrent layer: its sizes, length, direction, dtype and what the types know.
#[derive(Debug)]
struct Case {
    dtype: kiln::DType,
    m: usize,
    k: usize,
    q: usize,
    r: usize,
    steps: usize,
    reverse: bool,
    /// Whether the sequence's length is in its type.
    length_known: bool,
    /// Whether the slices' rows are in the types (the rewrites need them).
    rows_known: bool,
}

impl Case {
    fn random(rng: &mut Rng) -> Case {
        Case {
            dtype: [kiln::f32, kiln::f64, kiln::i32, kiln::i64][rng.below(4)],
            // Sometimes no rows: nothing to gain, and `-1` in a reshape would say nothing.
            m: rng.below(6),
            k: 1 + rng.below(4),
            q: 1 + rng.below(6),
            r: 1 + rng.below(3),
            steps: rng.below(5),
            reverse: rng.below(2) == 1,
            length_known: rng.below(2) == 1,
            rows_known: rng.below(5) != 0,
        }
    }

    /// The layer: `h' = act(x @ wx + h @ wh)`, carries `gw += x^T h'` and `gb += sum(h', 0)`,
    /// stacked `h'` and `h' @ v`.
    fn build(&self, g: &Graph) -> (Vec<kiln::Var>, Vec<kiln::Var>) {
        let d = self.dtype;
        let rows = self.rows_known.then_some(self.m as i64);
        let len = self.length_known.then_some(self.steps as i64);
        let h0 = g.input("h0", d, [rows, Some(self.q as i64)]);
        let xs = g.input("xs", d, [len, rows, Some(self.k as i64)]);
        let wx = g.input("wx", d, [Some(self.k as i64), Some(self.q as i64)]);
        let wh = g.input("wh", d, [Some(self.q as i64), Some(self.q as i64)]);
        let v = g.input("v", d, [Some(self.q as i64), Some(self.r as i64)]);
        let gw0 = g.input("gw0", d, [Some(self.k as i64), Some(self.q as i64)]);
        let gb0 = g.input("gb0", d, [Some(self.q as i64)]);
        let float = d.is_float();
        let body = |c: &[kiln::Var], x: &[kiln::Var]| {
            let pre = x[0].matmul(&wx) + c[0].matmul(&wh);
            let h = if float { pre.tanh() } else { pre };
            let gw = &c[1] + x[0].transpose(&[1, 0]).matmul(&h);
            let gb = &c[2] + h.sum(Some(&[0]), false);
            let hv = h.matmul(&v);
            (vec![h.clone(), gw, gb], vec![h, hv])
        };
        let (c, s) = match self.reverse {
            true => scan_reverse(&[&h0, &gw0, &gb0], &[&xs], body),
            false => scan(&[&h0, &gw0, &gb0], &[&xs], body),
        };
        let ins = vec![h0, xs, wx, wh, v, gw0, gb0];
        let outs = vec![
            c[0].clone(),
            c[1].clone(),
            c[2].clone(),
            s[0].clone(),
            s[1].clone(),
        ];
        (ins, outs)
    }

    fn inputs(&self, seed: u64) -> Vec<Tensor> {
        // Integers stay small (rounded normals), and the weights scale so that floats stay
        // in tanh's range where rounding shows.
        let shapes: [&[usize]; 7] = [
            &[self.m, self.q],
            &[self.steps, self.m, self.k],
            &[self.k, self.q],
            &[self.q, self.q],
            &[self.q, self.r],
            &[self.k, self.q],
            &[self.q],
        ];
        (shapes.iter().enumerate())
            .map(|(i, s)| normal_values(self.dtype, s, seed + i as u64, 1.5))
            .collect()
    }
}

fn bits_equal(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && (a.to_f64_vec().iter().zip(b.to_f64_vec()))
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Whether `got` is `want` up to the rounding of a sum of `terms` terms reordered.
fn agrees(got: &Tensor, want: &Tensor, terms: usize) -> bool {
    let eps = match got.dtype() {
        kiln::DType::F32 => f32::EPSILON as f64,
        kiln::DType::F64 => f64::EPSILON,
        _ => return bits_equal(got, want),
    };
    got.shape() == want.shape()
        && (got.to_f64_vec().iter().zip(want.to_f64_vec()))
            .all(|(g, w)| (g - w).abs() <= 4.0 * eps * terms as f64 * w.abs().max(1.0))
}

#[test]
fn random_recurrent_layers_give_what_they_give_without_the_rewrites() {
    let mut rng = Rng(0x5ca9_0f75);
    let mut fired = 0;
    for case_no in 0..60 {
        let case = Case::random(&mut rng);
        let inputs = case.inputs(1000 + 10 * case_no);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        for backend in backends_with_gpu_host() {
            let run = |optimize: bool| {
                let g = Graph::new();
                let (ins, outs) = case.build(&g);
                let f = function(
                    &ins.iter().collect::<Vec<_>>(),
                    &outs.iter().collect::<Vec<_>>(),
                )
                .options(kiln::CompileOptions {
                    optimize,
                    backend: Some(backend),
                    ..Default::default()
                })
                .compile()
                .unwrap_or_else(|e| panic!("{case:?}: {e}"));
                let got = f
                    .call(&refs)
                    .unwrap_or_else(|e| panic!("{case:?} {backend:?}: {e}"));
                (
                    got,
                    products_per_loop(&f.func().body),
                    kiln::ir::text::print_func(f.func()),
                )
            };
            let (want, before, fun0) = run(false);
            let (got, after, _) = run(true);
            assert_eq!(before, vec![4], "{case:?}\n{}", fun0);
            if case.rows_known && case.m > 0 {
                // x @ wx moves before the loop, gw's product and h' @ v after it: h @ wh stays.
                assert_eq!(after, vec![1], "{case:?} {backend:?}");
                fired += 1;
            }
            let names = ["h", "gw", "gb", "hs", "hv"];
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = match names[k] {
                    "gw" => agrees(g, w, case.steps * case.m + 1),
                    "gb" => agrees(g, w, case.steps * case.m + 1),
                    _ => bits_equal(g, w),
                };
                assert!(
                    ok,
                    "{case:?} {backend:?} output {}: {g:?}, without the rewrites {w:?}",
                    names[k]
                );
            }
        }
    }
    assert!(fired > 40, "the rewrites fired in {fired} runs");
}

/// An RNN trained through `kiln::grad`: the reverse scan of its gradient accumulates the
/// weights' gradients in carries, which the rewrites turn into products after the loop. The
/// gradients match finite differences and the loops keep one product each.
#[test]
fn an_rnns_gradients_through_the_pushed_out_loops_match_finite_differences() {
    let g = Graph::new();
    let xs = g.input("xs", kiln::f64, [Some(5), Some(3), Some(2)]);
    let h0 = g.input("h0", kiln::f64, [Some(3), Some(4)]);
    let wx = g.input("wx", kiln::f64, [Some(2), Some(4)]);
    let wh = g.input("wh", kiln::f64, [Some(4), Some(4)]);
    let b = g.input("b", kiln::f64, [Some(4)]);
    let (_, hs) = scan(&[&h0], &[&xs], |h, x| {
        let h = (x[0].matmul(&wx) + h[0].matmul(&wh) + &b).tanh();
        (vec![h.clone()], vec![h])
    });
    let loss = (&hs[0] * &hs[0]).sum(None, false);
    let grads = grad(&loss, &[&wx, &wh, &b, &xs]).unwrap();
    let mut outs = vec![loss.clone()];
    outs.extend(grads);
    let ins = [&xs, &h0, &wx, &wh, &b];
    let values: Vec<Tensor> = [&[5, 3, 2][..], &[3, 4], &[2, 4], &[4, 4], &[4]]
        .iter()
        .enumerate()
        .map(|(i, s)| normal_values(kiln::f64, s, 77 + i as u64, 0.6))
        .collect();
    let refs: Vec<&Tensor> = values.iter().collect();
    for backend in backends_with_gpu_host() {
        let f = function(&ins, &outs.iter().collect::<Vec<_>>())
            .backend(backend)
            .compile()
            .unwrap();
        assert_eq!(products_per_loop(&f.func().body), vec![1, 1], "{backend:?}");
        let got = f.call(&refs).unwrap();
        let loss_of = function(&ins, &[&loss]).backend(backend).compile().unwrap();
        // Central differences of the loss in each element of wx, wh, b and xs.
        for (slot, gi) in [(2, 1), (3, 2), (4, 3), (0, 4)] {
            let base = values[slot].to_f64_vec();
            let analytic = got[gi].to_f64_vec();
            for (e, want) in analytic.iter().enumerate() {
                let at = |d: f64| {
                    let mut v = base.clone();
                    v[e] += d;
                    let mut vals = values.clone();
                    vals[slot] = Tensor::F64(
                        ndarray::ArrayD::from_shape_vec(values[slot].shape().to_vec(), v).unwrap(),
                    );
                    let r: Vec<&Tensor> = vals.iter().collect();
                    loss_of.call(&r).unwrap()[0].to_f64_vec()[0]
                };
                let h = 1e-6;
                let numeric = (at(h) - at(-h)) / (2.0 * h);
                assert!(
                    (numeric - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{backend:?} input {slot} element {e}: {want} by kiln::grad, {numeric} by differences"
                );
            }
        }
    }
}
