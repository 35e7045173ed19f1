//! The plan's view steps (`lower::view`) against each op's reference `perform`: random chains
//! of `transpose`, `broadcast_to`, `expand_dims`, `squeeze`, `slice` (negative steps, clamped
//! and omitted bounds) and `reshape` over arrays of rank 0 to 5, applied as layouts over the
//! first array's buffer, must reach exactly the elements `perform` copies; where `perform`
//! refuses an op, the view must refuse it too. A reshape of a layout that is not row-major
//! copies first, as the backends that keep views do.

use kiln::ir::Op;
use kiln::lower::view::{Layout, View};
use kiln::Tensor;
use ndarray::{ArrayD, IxDyn};

/// A small, seeded source of choices: kiln's own counter-based stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        (kiln::random::uniform_f64(0x5eed, self.0) * (1u64 << 53) as f64) as u64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn shuffle(rng: &mut Rng, v: &mut [usize]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
}

/// A view op over an array of `shape`, now and then one that does not fit it.
fn random_op(rng: &mut Rng, shape: &[usize]) -> Op {
    let r = shape.len();
    match rng.below(6) {
        0 => {
            let mut perm: Vec<usize> = (0..r).collect();
            shuffle(rng, &mut perm);
            Op::Transpose { perm }
        }
        1 => {
            let lead = if r >= 5 { 0 } else { rng.below(3.min(6 - r)) };
            let mut out: Vec<usize> = (0..lead).map(|_| rng.below(3) + 1).collect();
            for &d in shape {
                out.push(match d {
                    1 => rng.below(4),
                    d if rng.chance(20) => d + 1,
                    d => d,
                });
            }
            Op::BroadcastTo { shape: out }
        }
        2 if r < 5 => {
            let k = 1 + rng.below(2.min(5 - r));
            let mut axes: Vec<usize> = (0..r + k).collect();
            shuffle(rng, &mut axes);
            axes.truncate(k);
            Op::ExpandDims { axes }
        }
        3 => {
            let axes: Vec<usize> = (0..r)
                .filter(|&d| (shape[d] == 1 && rng.chance(2)) || rng.chance(25))
                .collect();
            Op::Squeeze { axes }
        }
        4 => {
            let m = rng.below(r + 1);
            let bound = |rng: &mut Rng, n: usize| -> i64 {
                match rng.below(6) {
                    0 => i64::MIN,
                    1 => i64::MAX,
                    2 => -(rng.below(n + 3) as i64),
                    _ => rng.below(n + 3) as i64,
                }
            };
            let (mut starts, mut stops, mut steps) = (Vec::new(), Vec::new(), Vec::new());
            for &n in &shape[..m] {
                starts.push(bound(rng, n));
                stops.push(bound(rng, n));
                let step = 1 + rng.below(3) as i64;
                steps.push(if rng.chance(2) { -step } else { step });
            }
            Op::Slice {
                starts,
                stops,
                steps,
            }
        }
        _ => {
            let n: usize = shape.iter().product();
            let shape: Vec<i64> = match rng.below(4) {
                0 => vec![-1],
                1 => vec![1, n as i64],
                2 if r >= 2 => {
                    let k = rng.below(r - 1);
                    let mut s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                    let merged = s[k] * s[k + 1];
                    s.splice(k..k + 2, [merged]);
                    s
                }
                _ => shape.iter().rev().map(|&d| d as i64).collect(),
            };
            Op::Reshape { shape }
        }
    }
}

/// The elements `l` reaches in `data`, in row-major order of its shape.
fn gather(data: &[f64], l: &Layout) -> Vec<f64> {
    let n: usize = l.shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; l.shape.len()];
    for _ in 0..n {
        let at = l.offset
            + idx
                .iter()
                .zip(&l.strides)
                .map(|(&i, &s)| i as isize * s)
                .sum::<isize>();
        out.push(data[usize::try_from(at).expect("inside the buffer")]);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < l.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

#[test]
fn view_steps_reach_the_elements_perform_copies() {
    let mut rng = Rng(0);
    let (mut applied, mut refused, mut copied) = (0, 0, 0);
    for case in 0..4000 {
        let rank = rng.below(6);
        let shape: Vec<usize> = (0..rank)
            .map(|_| rng.below(4) + usize::from(rng.chance(4)))
            .collect();
        let n: usize = shape.iter().product();
        let mut data: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut tensor = Tensor::F64(ArrayD::from_shape_vec(IxDyn(&shape), data.clone()).unwrap());
        let mut layout = Layout::row_major(&shape);
        let mut chain = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let op = random_op(&mut rng, tensor.shape());
            chain.push(op.clone());
            let view = View::of(&op, tensor.shape().len()).expect("a view op");
            let reference = kiln::perform::perform(&op, &[&tensor]);
            let mut got = view.apply(&layout);
            if got.is_none() && matches!(view, View::Reshape { .. }) && reference.is_ok() {
                // Copy to a fresh row-major buffer first, as AOT and the GPU do.
                data = gather(&data, &layout);
                layout = Layout::row_major(&layout.shape);
                got = view.apply(&layout);
                copied += 1;
            }
            match (reference, got) {
                (Ok(mut t), Some(l)) => {
                    let t = t.remove(0);
                    assert_eq!(l.shape, t.shape(), "case {case}: {chain:?}");
                    assert_eq!(
                        gather(&data, &l),
                        t.to_f64_vec(),
                        "case {case}: {chain:?} {l:?}"
                    );
                    tensor = t;
                    layout = l;
                    applied += 1;
                }
                (Err(_), None) => {
                    refused += 1;
                    break;
                }
                (Ok(_), None) => panic!(
                    "case {case}: the view refuses what perform does: {chain:?} on {layout:?}"
                ),
                (Err(e), Some(l)) => panic!(
                    "case {case}: perform refuses ({e}) what the view does: {chain:?} gives {l:?}"
                ),
            }
        }
    }
    // The generator reaches every outcome.
    assert!(
        applied > 5000 && refused > 100 && copied > 100,
        "{applied} {refused} {copied}"
    );
}
