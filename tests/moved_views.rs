//! A `transpose` or `reshape` that reads an array for the last time takes over its buffer on the
//! CPU backend (`perform::view_moving`) instead of copying it: the elements must be the copying
//! op's, the buffer the argument's, and whatever leaves the VM (a function's outputs, a user's
//! op's inputs, the buffers it reuses) row-major as before. The batched products that read such
//! restrided operands are checked against the definition (the interpreter shares their code, so
//! comparing the backends could not find a bug in it).

use kiln::custom::{CustomOp, PerformContext};
use kiln::ir::Op;
use kiln::{function, Backend, Graph, Tensor, TensorType, Var};
use ndarray::{ArrayD, IxDyn};

/// Distinct values, so that a misplaced element shows.
fn counting(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| i as f32).collect()).unwrap())
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// A small seeded stream of choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 += 1;
        let u = kiln::random::uniform_f64(0x7a11, self.0);
        ((u * n as f64) as usize).min(n - 1)
    }
}

/// A transpose or a reshape of an array of `shape` (a reshape now and then with a `-1`, now and
/// then one that does not fit).
fn random_view(rng: &mut Rng, shape: &[usize]) -> Op {
    let r = shape.len();
    if rng.below(2) == 0 {
        let mut perm: Vec<usize> = (0..r).collect();
        for i in (1..r).rev() {
            perm.swap(i, rng.below(i + 1));
        }
        return Op::Transpose { perm };
    }
    let n: usize = shape.iter().product();
    let mut target: Vec<i64> = Vec::new();
    let mut left = n;
    while target.len() < 4 && left > 1 && rng.below(3) > 0 {
        let d = (2..=left).find(|d| left.is_multiple_of(*d)).unwrap();
        target.push(d as i64);
        left /= d;
    }
    target.push(left as i64);
    if rng.below(4) == 0 {
        let k = rng.below(target.len());
        target[k] = -1;
    }
    if rng.below(10) == 0 {
        target.push(7);
    }
    Op::Reshape { shape: target }
}

#[test]
fn random_chains_of_moved_views_give_the_copying_ops_elements() {
    let mut rng = Rng(1);
    let (mut moved, mut copied) = (0, 0);
    for case in 0..400 {
        let rank = rng.below(6);
        let shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(4)).collect();
        // Every dtype: the moves are generic over the element.
        let dtypes = [
            kiln::DType::F32,
            kiln::DType::F64,
            kiln::DType::I32,
            kiln::DType::I64,
            kiln::DType::Bool,
            kiln::DType::F16,
            kiln::DType::BF16,
        ];
        let mut t = kiln::perform::cast(&counting(&shape), dtypes[case % dtypes.len()]);
        let mut reference = t.clone();
        for step in 0..4 {
            let op = random_view(&mut rng, t.shape());
            let want = kiln::perform::perform(&op, &[&reference]);
            let before = t.view().as_ptr();
            match kiln::perform::view_moving(&op, t) {
                Ok(view) => {
                    let want =
                        want.unwrap_or_else(|e| panic!("case {case} step {step}: {op:?}: {e}"));
                    assert_eq!(
                        view.shape(),
                        want[0].shape(),
                        "case {case} step {step}: {op:?}"
                    );
                    assert_eq!(view.dtype(), want[0].dtype());
                    let same = view.to_f64_vec() == want[0].to_f64_vec();
                    assert!(same, "case {case} step {step}: {op:?}");
                    assert_eq!(view.view().as_ptr(), before, "case {case}: {op:?} copied");
                    moved += 1;
                    t = view;
                    reference = want[0].clone();
                }
                Err(back) => {
                    // Refused: a reshape of a restrided array (the op copies it), or one
                    // whose attributes do not fit (the op says so).
                    assert_eq!(back.view().as_ptr(), before);
                    match want {
                        Ok(w) => {
                            assert!(!back.view().is_standard_layout(), "case {case}: {op:?}");
                            copied += 1;
                            t = w[0].clone();
                            reference = w[0].clone();
                        }
                        Err(_) => t = back,
                    }
                }
            }
        }
    }
    assert!(moved > 400 && copied > 50, "moved {moved}, copied {copied}");
}

/// A user's op that refuses an input that is not row-major (as code that reads the buffer as
/// a slice would), else passes it through.
#[derive(Debug)]
struct NeedsRowMajor;

impl CustomOp for NeedsRowMajor {
    fn name(&self) -> &str {
        "needs_row_major"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        if !inputs[0].view().is_standard_layout() {
            return Err("input is not row-major".into());
        }
        outputs[0] = Some(inputs[0].clone());
        Ok(())
    }
}

#[test]
fn what_leaves_the_vm_is_row_major_after_moved_views() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3), Some(4), Some(5)]);
    // Head split and merge as attention writes them, a transposed output, a user's op fed by a
    // transpose, and a product of two restrided batches.
    let heads = (&x * 2.0)
        .reshape(&[2, 3, 20])
        .reshape(&[2, 3, 4, 5])
        .transpose(&[0, 2, 1, 3]);
    let merged = (&heads + 1.0).transpose(&[0, 2, 1, 3]).reshape(&[6, 20]);
    let flipped = (&x - 1.0).transpose(&[3, 1, 2, 0]);
    let custom = g.apply_custom(NeedsRowMajor, &[&(&x * 3.0).transpose(&[1, 0, 2, 3])]);
    let keys = (&x + 0.5).transpose(&[0, 1, 3, 2]);
    let scores = heads.matmul(
        &keys
            .transpose(&[0, 2, 1, 3])
            .reshape(&[2, 4, 3, 5])
            .transpose(&[0, 1, 3, 2]),
    );
    let outs = [&merged, &flipped, &custom[0], &scores];
    let input = counting(&[2, 3, 4, 5]);
    for (i, g) in same_on_cpu_as_interp(&x, &outs, &input).iter().enumerate() {
        assert!(g.view().is_standard_layout(), "output {i} is not row-major");
    }
}

#[test]
fn a_restrided_buffer_is_not_reused_for_a_row_major_result() {
    // 256 x 256 f32 is 256 KiB: large enough for the VM to keep dead buffers for reuse. The
    // restrided array dies at the sum; the next result of its shape must not be written into
    // its buffer as if it were row-major (the VM keeps only row-major buffers, and a kernel
    // checks the layout of the one it is handed).
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(256), Some(256)]);
    let t = (&x * 2.0).transpose(&[1, 0]);
    let s = t.sum(Some(&[0]), false);
    let later = (&x + &s.reshape(&[1, 256])).exp() * 0.5;
    let outs = [&later, &s];
    let input = Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[256, 256]), |i| {
        ((i[0] * 7 + i[1] * 3) % 17) as f32 / 16.0
    }));
    same_on_cpu_as_interp(&x, &outs, &input);
}

/// The CPU backend's outputs of `outs` at `input`, checked bit for bit against the
/// interpreter's. Each side is called twice: the second call reuses the buffers the first left.
fn same_on_cpu_as_interp(x: &Var, outs: &[&Var], input: &Tensor) -> Vec<Tensor> {
    let run = |backend| {
        let f = function(&[x], outs).backend(backend).compile().unwrap();
        f.call(&[input.view()]).unwrap();
        f.call(&[input.view()]).unwrap()
    };
    let (want, got) = (run(Backend::Interp), run(Backend::Cpu));
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(g.shape(), w.shape(), "output {i}");
        assert_eq!(bits(g), bits(w), "output {i}");
    }
    got
}

/// `a @ b` by the definition (numpy's matmul on operands of rank 2 or more), in f64: for each
/// batch index, each operand's matrix at that index (a dim of 1 read at 0), multiplied by loops.
fn matmul_reference(a: &ArrayD<f64>, b: &ArrayD<f64>) -> ArrayD<f64> {
    let (ra, rb) = (a.ndim(), b.ndim());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let batch = kiln::ir::types::broadcast_shapes(&a.shape()[..ra - 2], &b.shape()[..rb - 2])
        .expect("batch dims broadcast");
    fn matrix<'t>(
        t: &'t ArrayD<f64>,
        at: &[usize],
        batch: &[usize],
    ) -> ndarray::ArrayView2<'t, f64> {
        let lead = t.ndim() - 2;
        let mut v = t.view();
        for d in 0..lead {
            let i = if t.shape()[d] == 1 {
                0
            } else {
                at[batch.len() - lead + d]
            };
            v = v.index_axis_move(ndarray::Axis(0), i);
        }
        v.into_dimensionality::<ndarray::Ix2>().unwrap()
    }
    let mut out = Vec::new();
    for at in ndarray::indices(IxDyn(&batch)) {
        let at: Vec<usize> = (0..batch.len()).map(|d| at[d]).collect();
        let (x, y) = (matrix(a, &at, &batch), matrix(b, &at, &batch));
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|p| x[[i, p]] * y[[p, j]]).sum());
            }
        }
    }
    let mut shape = batch;
    shape.extend([m, n]);
    ArrayD::from_shape_vec(IxDyn(&shape), out).unwrap()
}

#[test]
fn batched_products_of_restrided_and_broadcast_batches_match_the_definition() {
    // The batched paths (one matrix for the whole batch, small products side by side, large
    // ones split) against the definition: batches of rank 0 to 3 with every broadcast pattern,
    // operands restrided as a moved head split leaves them. Small integers: the sums are exact.
    let mut rng = Rng(7);
    for case in 0..300 {
        // Now and then a product at the size from which each one is split among the threads
        // (2^21 multiply-adds), over a batch of two.
        let big = case % 75 == 0;
        let lead = if big { 1 } else { rng.below(4) };
        let batch: Vec<usize> = (0..lead)
            .map(|_| if big { 2 } else { 1 + rng.below(3) })
            .collect();
        let pick = |rng: &mut Rng| -> Vec<usize> {
            let keep = rng.below(lead + 1);
            batch[lead - keep..]
                .iter()
                .map(|&d| if rng.below(3) == 0 { 1 } else { d })
                .collect()
        };
        let (m, k, n) = if big {
            (128, 128, 128 + rng.below(3))
        } else {
            (1 + rng.below(9), 1 + rng.below(9), 1 + rng.below(20))
        };
        let operand = |lead: Vec<usize>, r: usize, c: usize, seed: u64, swapped: bool| {
            let mut shape = lead;
            shape.extend([r, c]);
            let vals = values_i(&shape, seed);
            // Restrided like a head split: the array laid out with its last two axes swapped.
            (vals.clone(), restrided(&vals, swapped))
        };
        let (la, lb) = (pick(&mut rng), pick(&mut rng));
        let (sa, sb) = (rng.below(2) == 0, rng.below(2) == 0);
        let (a, ta) = operand(la, m, k, 2 * case, sa);
        let (b, tb) = operand(lb, k, n, 2 * case + 1, sb);
        let want = matmul_reference(&a, &b);
        for (t, dtype) in [(kiln::DType::F32, "f32"), (kiln::DType::F64, "f64")] {
            let (x, y) = (kiln::perform::cast(&ta, t), kiln::perform::cast(&tb, t));
            let got = kiln::perform::matmul_into(&x.view(), &y.view(), None)
                .unwrap_or_else(|e| panic!("case {case}: {e}"));
            assert_eq!(got.shape(), want.shape(), "case {case} {dtype}");
            let same = got.to_f64_vec() == want.iter().copied().collect::<Vec<_>>();
            assert!(
                same,
                "case {case} {dtype}: {:?} @ {:?}",
                a.shape(),
                b.shape()
            );
        }
    }
}

/// Small integers (exact in any float sum here) from a seeded stream.
fn values_i(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut k = 0;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        k += 1;
        (kiln::random::uniform_f64(seed, k) * 9.0).floor() - 4.0
    })
}

/// `v` as an f64 tensor, laid out row-major or (with `swapped`) with its last two axes swapped
/// in memory: the same elements, other strides.
fn restrided(v: &ArrayD<f64>, swapped: bool) -> Tensor {
    if !swapped {
        return Tensor::F64(v.clone());
    }
    let r = v.ndim();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    let stored = v
        .view()
        .permuted_axes(IxDyn(&perm))
        .as_standard_layout()
        .into_owned();
    Tensor::F64(stored.permuted_axes(IxDyn(&perm)))
}
