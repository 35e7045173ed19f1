//! A `transpose` or `reshape` that reads an array for the last time takes over its buffer on the
//! CPU backend (`perform::view_moving`) instead of copying it: the elements must be the copying
//! op's, the buffer the argument's, and whatever leaves the VM (a function's outputs, a user's
//! op's inputs, the buffers it reuses) row-major as before.

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
        let d = (2..=left).find(|d| left % d == 0).unwrap();
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
        let mut t = counting(&shape);
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
                    assert_eq!(
                        bits(&view),
                        bits(&want[0]),
                        "case {case} step {step}: {op:?}"
                    );
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
