//! Random differentiable programs in f64 (ranks 0 to 4, every broadcast pattern, inputs with
//! `?` dims), their gradients from `kiln::grad` against central finite differences, on the
//! interpreter and the CPU backend. Every gradient must have its input's shape.
//!
//! The programs come from a seed that changes from run to run; a failure prints it, and
//! `KILN_RANDOM_SEED=<seed>` replays them (`KILN_RANDOM_CASES` sets how many).

mod common;

use kiln::{function, Backend, Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};

struct Bytes {
    data: Vec<u8>,
    at: usize,
}

impl Bytes {
    fn pick(&mut self, n: usize) -> usize {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b as usize % n.max(1)
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// splitmix64.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn uniform(seed: u64, i: u64) -> f64 {
    (mix(seed ^ mix(i)) >> 11) as f64 / (1u64 << 53) as f64
}

struct Program {
    inputs: Vec<Var>,
    loss: Var,
    points: Vec<ArrayD<f64>>,
}

/// The extent of `shape` aligned to the right of `base`.
fn shape_of(v: &Var, base: &[usize]) -> Vec<usize> {
    let ty = v.ty();
    let lead = base.len() - ty.rank();
    ty.shape
        .iter()
        .enumerate()
        .map(|(k, d)| d.unwrap_or(base[lead + k]))
        .collect()
}

fn build(seed: u64, i: u64) -> Program {
    let len = 6 + (mix(seed ^ i) % 40) as usize;
    let data: Vec<u8> = (0..len as u64)
        .map(|k| mix(seed ^ mix(i ^ (k << 20))) as u8)
        .collect();
    let mut r = Bytes { data, at: 0 };
    let rank = r.pick(5);
    let base: Vec<usize> = (0..rank).map(|_| 1 + r.pick(3)).collect();
    let g = Graph::new();
    let mut inputs = Vec::new();
    let mut points = Vec::new();
    for k in 0..1 + r.pick(3) {
        let vrank = if k == 0 {
            rank
        } else {
            rank - r.pick(rank + 1)
        };
        let lead = rank - vrank;
        let dims: Vec<Option<usize>> = (0..vrank)
            .map(|a| {
                let d = base[lead + a];
                match r.pick(4) {
                    0 => Some(1),
                    1 if d > 1 => None,
                    _ => Some(d),
                }
            })
            .collect();
        let shape: Vec<usize> = dims
            .iter()
            .enumerate()
            .map(|(a, d)| d.unwrap_or(base[lead + a]))
            .collect();
        let n: usize = shape.iter().product();
        let pts = (0..n as u64)
            .map(|j| uniform(seed ^ i ^ (k as u64) << 40, j) * 2.0 - 1.0)
            .collect();
        points.push(ArrayD::from_shape_vec(IxDyn(&shape), pts).unwrap());
        let dims: Vec<Option<i64>> = dims.iter().map(|d| d.map(|d| d as i64)).collect();
        inputs.push(g.input(&format!("x{k}"), kiln::f64, dims));
    }
    let mut pool: Vec<Var> = inputs.clone();
    let mut steps = 0;
    while !r.done() && steps < 10 {
        steps += 1;
        let p = pool[r.pick(pool.len())].clone();
        let q = pool[r.pick(pool.len())].clone();
        let shape = shape_of(&p, &base);
        let v = match r.pick(12) {
            0 => &p + &q,
            1 => &p - &q,
            2 => &p * &q,
            3 => &p / &(q.square() + 1.0),
            4 => p.tanh(),
            5 => p.sin(),
            6 => p.tanh().exp(),
            7 => p.sigmoid(),
            8 if !shape.is_empty() => {
                // A reduction over some axes, kept as 1s so the shape still broadcasts.
                let axes: Vec<i64> = (0..shape.len() as i64).filter(|_| r.pick(2) == 0).collect();
                if r.pick(2) == 0 {
                    p.sum(Some(&axes), true)
                } else {
                    p.mean(Some(&axes), true)
                }
            }
            9 if base.len() >= 2 => {
                // Batched products back to the base shape.
                let n = base.len();
                let (m, k) = (base[n - 2], base[n - 1]);
                let lead = |v: &Var| {
                    let s = shape_of(v, &base);
                    if s.len() >= 2 {
                        s[..s.len() - 2].to_vec()
                    } else {
                        vec![]
                    }
                };
                let pa = p.broadcast_to(&i64s(&[lead(&p), vec![m, k]].concat()));
                let qa = q.broadcast_to(&i64s(&[lead(&q), vec![m, k]].concat()));
                let mut perm: Vec<i64> = (0..qa.rank() as i64).collect();
                let l = perm.len();
                perm.swap(l - 1, l - 2);
                pa.matmul(&qa.transpose(&perm)).matmul(&qa) * 0.1
            }
            // Through a transpose and a reshape, and back. (The gradient of a reshape needs
            // the input's shape from its type: at most one `?` dim.)
            10 if !shape.is_empty() && p.ty().shape.iter().filter(|d| d.is_none()).count() <= 1 => {
                let mut perm: Vec<i64> = (0..shape.len() as i64).collect();
                perm.reverse();
                let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                p.transpose(&perm)
                    .transpose(&perm)
                    .reshape(&[-1])
                    .reshape(&dims)
            }
            _ => kiln::select(&p.gt(0.3), &p, q.square()),
        };
        if v.check().is_ok() {
            pool.push(v);
        }
    }
    // Every value weighted and summed, so each takes part in the loss.
    let mut loss = pool[0].sum(None, false) * 0.0;
    for (k, v) in pool.iter().enumerate() {
        loss = loss + (v * (0.5 + k as f64 * 0.25)).sum(None, false);
    }
    Program {
        inputs,
        loss,
        points,
    }
}

fn check(p: &Program, backend: Backend) -> Result<(), String> {
    let refs: Vec<&Var> = p.inputs.iter().collect();
    let grads = kiln::grad(&p.loss, &refs).map_err(|e| e.to_string())?;
    let mut outs = vec![&p.loss];
    outs.extend(grads.iter());
    let f = function(&refs, &outs)
        .backend(backend)
        .compile()
        .map_err(|e| e.to_string())?;
    let loss_only = function(&refs, &[&p.loss])
        .backend(Backend::Interp)
        .compile()
        .map_err(|e| e.to_string())?;
    let eval = |pts: &[ArrayD<f64>]| -> Result<Vec<Tensor>, String> {
        let views: Vec<_> = pts.iter().map(|a| a.view()).collect();
        f.call(&views).map_err(|e| e.to_string())
    };
    let loss_at = |pts: &[ArrayD<f64>]| -> Result<f64, String> {
        let views: Vec<_> = pts.iter().map(|a| a.view()).collect();
        Ok(loss_only.call(&views).map_err(|e| e.to_string())?[0].to_f64_vec()[0])
    };
    let got = eval(&p.points)?;
    let eps = 1e-6;
    for (k, point) in p.points.iter().enumerate() {
        let sym = &got[1 + k];
        if sym.shape() != point.shape() {
            return Err(format!(
                "the gradient of x{k} has shape {:?}, the input {:?}",
                sym.shape(),
                point.shape()
            ));
        }
        let sym = sym.to_f64_vec();
        for (j, &sym_j) in sym.iter().enumerate() {
            let mut pts = p.points.clone();
            let at = |a: &mut ArrayD<f64>| a.as_slice_mut().expect("standard layout")[j];
            let x0 = at(&mut pts[k]);
            pts[k].as_slice_mut().unwrap()[j] = x0 + eps;
            let up = loss_at(&pts)?;
            pts[k].as_slice_mut().unwrap()[j] = x0 - eps;
            let down = loss_at(&pts)?;
            let num = (up - down) / (2.0 * eps);
            if (sym_j - num).abs() > 1e-4 + 1e-4 * num.abs() {
                return Err(format!(
                    "d loss / d x{k}[{j}]: symbolic {sym_j} vs finite differences {num}"
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn random_programs_have_the_gradients_finite_differences_give() {
    if std::env::var("KILN_BACKEND").is_ok_and(|b| b == "interp") {
        eprintln!("skipped: the random programs choose their backends; the default run has them");
        return;
    }
    let seed = common::random_seed("random differentiable programs");
    let n: u64 = std::env::var("KILN_RANDOM_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map_or(150, |c: u64| c.div_ceil(8));
    eprintln!("random differentiable programs: {n} programs");
    for i in 0..n {
        let p = build(seed, i);
        for backend in [Backend::Interp, Backend::Cpu] {
            if let Err(e) = check(&p, backend) {
                let text =
                    kiln::graph::to_ssa("case", &p.inputs, std::slice::from_ref(&p.loss), &[])
                        .map(|s| kiln::ir::text::print_func(&s.func))
                        .unwrap_or_default();
                panic!(
                    "{backend}: {e}\nseed {seed}, program {i} (KILN_RANDOM_SEED={seed} replays it)\n{text}"
                );
            }
        }
    }
}

/// A shape as the graph builders take it.
fn i64s(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}
