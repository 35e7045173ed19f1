//! Random graphs for differential testing of the backends, shared by `tests/backend_diff.rs` and
//! the cargo-fuzz target `fuzz/fuzz_targets/backends.rs`: a byte string drives the choices.
//!
//! Every value has a shape that broadcasts to the base shape `[a, b]` (`[a, b]`, `[1, b]`,
//! `[a, 1]`, `[b]`, `[]`), so any two values combine. Ops cover unary and binary elementwise
//! work (integer division and mod by zero included), comparisons and `select`, reductions
//! (argmax and argmin among them, over one axis or both) with and without fused producers,
//! views (reversing and strided slices, transposes, reshapes, broadcasts, concatenation), casts
//! between dtypes and matmul. Values that the backends may compute a few ulps apart
//! (transcendentals, sums in another order) are marked inexact: no comparison, cast to an
//! integer, rounding or integer division reads them, since one ulp there can flip a result.

use kiln::{function, Backend, CompileOptions, DType, Graph, Tensor, TensorRef, Var};
use ndarray::{ArrayD, IxDyn};

/// A function of two inputs and the arrays to call it on.
pub struct Case {
    pub inputs: Vec<Var>,
    pub outputs: Vec<Var>,
    pub args: Vec<Tensor>,
    /// Whether some value is f32: an f64 result may then carry an f32 step's rounding.
    pub has_f32: bool,
}

struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn pick(&mut self, n: usize) -> usize {
        self.next() as usize % n.max(1)
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

#[derive(Clone)]
struct Val {
    v: Var,
    exact: bool,
}

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::I32, DType::I64];

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64)
}

/// Input values: small integers, or floats in [-3, 3] with some specials.
fn array(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let x = |i: usize| kiln::random::uniform_f32(seed, i as u64) as f64 * 6.0 - 3.0;
    let sh = IxDyn(shape);
    match dtype {
        DType::F32 => Tensor::F32(ArrayD::from_shape_fn(sh, |i| {
            let k = flat(&i, shape);
            match k % 17 {
                16 if n > 4 => f32::NAN,
                15 if n > 4 => -0.0,
                _ => x(k) as f32,
            }
        })),
        DType::F64 => Tensor::F64(ArrayD::from_shape_fn(sh, |i| x(flat(&i, shape)))),
        DType::I32 => Tensor::I32(ArrayD::from_shape_fn(sh, |i| x(flat(&i, shape)) as i32)),
        _ => Tensor::I64(ArrayD::from_shape_fn(sh, |i| x(flat(&i, shape)) as i64)),
    }
}

fn flat(i: &IxDyn, shape: &[usize]) -> usize {
    let mut k = 0;
    for (d, &n) in shape.iter().enumerate() {
        k = k * n + i[d];
    }
    k
}

/// Builds a random function from `data` (any bytes make a well-typed function).
pub fn build(data: &[u8]) -> Case {
    let mut r = Bytes { data, at: 0 };
    let (a, b) = (1 + r.pick(4), 1 + r.pick(5));
    let dtype = DTYPES[r.pick(4)];
    let g = Graph::new();
    let x = g.input("x", dtype, [Some(a), Some(b)]);
    let y_shape: Vec<usize> = match r.pick(4) {
        0 => vec![a, b],
        1 => vec![1, b],
        2 => vec![a, 1],
        _ => vec![b],
    };
    let y_dtype = DTYPES[r.pick(4)];
    let y = g.input(
        "y",
        y_dtype,
        y_shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
    );
    let mut pool = vec![
        Val {
            v: x.clone(),
            exact: true,
        },
        Val {
            v: y.clone(),
            exact: true,
        },
    ];
    let mut steps = 0;
    while !r.done() && steps < 24 {
        steps += 1;
        let p = pool[r.pick(pool.len())].clone();
        let q = pool[r.pick(pool.len())].clone();
        if let Some(v) = step(&mut r, &p, &q, a, b) {
            if v.v.check().is_ok() {
                pool.push(v);
            }
        }
    }
    let has_f32 = pool.iter().any(|v| v.v.ty().dtype == DType::F32);
    // The last value, and every value (as f64) added up, so that nothing built is dead.
    let mut all = pool[0].v.cast(DType::F64);
    for v in &pool[1..] {
        all = &all + &v.v.cast(DType::F64);
    }
    let outputs = vec![pool[pool.len() - 1].v.clone(), all];
    let args = vec![
        array(dtype, &[a, b], 1 + data.len() as u64),
        array(y_dtype, &y_shape, 2 + data.len() as u64),
    ];
    Case {
        inputs: vec![x, y],
        outputs,
        args,
        has_f32,
    }
}

/// `q` in `p`'s dtype.
fn like(p: &Val, q: &Val) -> Option<Val> {
    let (dp, dq) = (p.v.ty().dtype, q.v.ty().dtype);
    if dp == dq {
        return Some(q.clone());
    }
    // A float cast to an integer truncates: one ulp apart can land on two integers.
    if !is_float(dp) && is_float(dq) && !q.exact {
        return None;
    }
    Some(Val {
        v: q.v.cast(dp),
        exact: q.exact,
    })
}

fn step(r: &mut Bytes, p: &Val, q: &Val, a: usize, b: usize) -> Option<Val> {
    let dt = p.v.ty().dtype;
    let float = is_float(dt);
    let full = p.v.ty().rank() == 2 && p.v.ty().shape == [Some(a), Some(b)];
    let out = |v: Var, exact: bool| Some(Val { v, exact });
    match r.pick(16) {
        // Unary, by dtype.
        0 if float => out(
            match r.pick(7) {
                0 => p.v.exp(),
                1 => (p.v.abs() + 1.0).log(),
                2 => p.v.sin(),
                3 => p.v.tanh(),
                4 => p.v.abs().sqrt(),
                5 => p.v.sigmoid(),
                _ => p.v.erf(),
            },
            false,
        ),
        0 => out(
            match r.pick(3) {
                0 => -&p.v,
                1 => p.v.abs(),
                _ => p.v.square(),
            },
            p.exact,
        ),
        // Arithmetic.
        1 | 2 => {
            let q = like(p, q)?;
            let exact = p.exact && q.exact;
            out(
                match r.pick(6) {
                    0 => &p.v + &q.v,
                    1 => &p.v - &q.v,
                    2 => &p.v * &q.v,
                    3 => p.v.maximum(&q.v),
                    4 => p.v.minimum(&q.v),
                    _ if float => &p.v / &q.v,
                    _ => p.v.maximum(&q.v),
                },
                exact,
            )
        }
        // Integer division and mod, by zero too.
        3 if !float => {
            let q = like(p, q)?;
            let v = if r.pick(2) == 0 {
                p.v.floordiv(&q.v)
            } else {
                p.v.modulo(&q.v)
            };
            out(v, p.exact && q.exact)
        }
        // Comparisons and select, on exact values only.
        4 if p.exact && q.exact => {
            let q = like(p, q)?;
            let c = match r.pick(3) {
                0 => p.v.gt(&q.v),
                1 => p.v.le(&q.v),
                _ => p.v.eq(&q.v),
            };
            out(kiln::select(&c, &p.v, &q.v), true)
        }
        // Reductions that keep the family of shapes: over one axis or both (several axes,
        // which a transposed or broadcast view keeps from merging into one loop), max, min,
        // sum, argmax and argmin (of exact values only: one ulp can move an index).
        5 | 6 => {
            let rank = p.v.ty().rank();
            let kind = r.pick(5);
            let both = rank == 2 && r.pick(3) == 0;
            let axes: Option<Vec<i64>> = match rank {
                2 if both => Some(vec![0, 1]),
                2 => Some(vec![r.pick(2) as i64]),
                _ => None,
            };
            let keep = rank == 2;
            if kind >= 3 {
                if !p.exact {
                    return None;
                }
                let axis = axes.filter(|a| a.len() == 1).map(|a| a[0]);
                // A fused producer too: `argmax(-x)` reads x once.
                let x = if r.pick(2) == 0 { -&p.v } else { p.v.clone() };
                let v = if kind == 3 {
                    x.argmax(axis, keep)
                } else {
                    x.argmin(axis, keep)
                };
                return out(v, true);
            }
            let v = match kind {
                0 => p.v.max(axes.as_deref(), keep),
                1 => p.v.min(axes.as_deref(), keep),
                _ => p.v.sum(axes.as_deref(), keep),
            };
            // A sum of a fused producer: `sum(exp(x))` reads x once.
            let v = if kind == 2 && float && r.pick(2) == 0 {
                let e = p.v.tanh();
                e.sum(axes.as_deref(), keep)
            } else {
                v
            };
            out(v, p.exact && kind < 2)
        }
        // Views.
        7 => out(p.v.broadcast_to(&[a, b]), p.exact),
        8 if full => out(p.v.slice(&[(None, None, -1)]), p.exact),
        9 if full => out(
            p.v.slice(&[(None, None, 1), (None, None, -1)])
                .reshape(&[(a * b) as i64])
                .reshape(&[a as i64, b as i64]),
            p.exact,
        ),
        10 if full => out(p.v.t().expand_dims(&[0]).squeeze(Some(&[0])).t(), p.exact),
        11 if full => {
            let q = like(p, q)?;
            let q = q.v.broadcast_to(&[a, b]);
            let c = kiln::concat(&[&p.v, &q], 0);
            out(c.slice(&[(Some(a as i64), None, 1)]), p.exact)
        }
        // Casts.
        12 => {
            let to = DTYPES[r.pick(4)];
            if !is_float(to) && float && !p.exact {
                return None;
            }
            out(p.v.cast(to), p.exact)
        }
        // Matmul back to the base shape.
        13 if full && float => {
            let q = like(p, q)?;
            let q = q.v.broadcast_to(&[a, b]);
            out(p.v.matmul(&q.t()).matmul(&q), false)
        }
        // Elementwise chains that fuse.
        14 if float => {
            let q = like(p, q)?;
            out((&p.v * 0.5 + &q.v).tanh() * &p.v, false)
        }
        _ => {
            let q = like(p, q)?;
            out(&p.v + &q.v, p.exact && q.exact)
        }
    }
}

/// Whether two results agree: integers and bools exactly, floats within a tolerance for the
/// few ulps a chain of inexact steps may grow (NaN matches NaN, infinities match exactly).
pub fn agree(a: &Tensor, b: &Tensor, has_f32: bool) -> Result<(), String> {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return Err(format!(
            "{}{:?} vs {}{:?}",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        ));
    }
    let tol = match a.dtype() {
        DType::F32 => 2e-4,
        DType::F64 if has_f32 => 2e-4,
        DType::F64 => 1e-9,
        _ => 0.0,
    };
    for (i, (x, y)) in a.to_f64_vec().into_iter().zip(b.to_f64_vec()).enumerate() {
        let same = (x.is_nan() && y.is_nan())
            || x == y
            || (x.is_finite()
                && y.is_finite()
                && (x - y).abs() <= tol * x.abs().max(y.abs()).max(1.0));
        if !same {
            return Err(format!("element {i}: {x} vs {y}"));
        }
    }
    Ok(())
}

/// Compiles the case for `backend` (optimizer on or off) and calls it twice: the second call
/// runs on the buffers the first left (pools, in-place steps). Returns the second call's outputs.
pub fn run(case: &Case, backend: Backend, optimize: bool) -> Result<Vec<Tensor>, String> {
    let ins: Vec<&Var> = case.inputs.iter().collect();
    let outs: Vec<&Var> = case.outputs.iter().collect();
    let f = function(&ins, &outs)
        .options(CompileOptions {
            backend: Some(backend),
            optimize,
            dump: Default::default(),
            ..Default::default()
        })
        .compile()
        .map_err(|e| format!("{backend} does not compile a random graph: {e}"))?;
    let args: Vec<TensorRef> = case.args.iter().map(|t| t.view()).collect();
    f.call(&args)
        .map_err(|e| format!("{backend} fails on a random graph: {e}"))?;
    f.call(&args)
        .map_err(|e| format!("{backend} fails on a random graph: {e}"))
}
