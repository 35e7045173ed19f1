//! Random programs for differential testing of the backends, shared by `tests/backend_diff.rs`
//! and the cargo-fuzz target `fuzz/fuzz_targets/backends.rs`: a byte string drives every
//! choice, so any bytes make a well-typed program and a failure is replayed from its bytes.
//!
//! What the programs cover, because a generator that cannot produce a case cannot find its bug:
//! - **Shapes.** A base shape of rank 0 to 5 with extents 0 to 4. Every value broadcasts to it:
//!   each input lacks any number of leading axes and holds 1 on any subset of the rest, so
//!   every broadcast pattern of two operands occurs. Input dims are declared known or `?`; a
//!   `?` is only declared where the extent is that of the base (a `?` never broadcasts:
//!   docs/reference/semantics.md).
//! - **Layouts.** Each argument is passed as a plain array or as a view that is not
//!   contiguous: transposed, reversed along some axes, every other element, an offset window
//!   of a larger array, or a broadcast view (stride 0) of a smaller one.
//! - **Dtypes.** `bool i32 i64 f32 f64`, with NaN, infinities and -0.0 among the floats.
//! - **Ops.** Unary and binary elementwise ops (integer division and mod by zero included),
//!   comparisons, `and`/`or`/`not`, `select`, casts between every pair of dtypes, reductions
//!   over any subset of axes with and without `keepdims` (and fused producers), softmax-like
//!   runs over the rows (row groups), views
//!   (transpose, reshape, broadcast_to, expand_dims, squeeze, reversing slices, concat and
//!   slice), batched `matmul` with broadcast batch dims, constants, lazy `ifelse` and `scan`.
//! - **State.** Now and then a shared variable the program reads and updates (in place where
//!   the optimizer may, by an elementwise step or a matrix product the CPU backend fuses into
//!   one GEMM step); its value after the calls is compared too.
//!
//! Values that backends may compute a few ulps apart (transcendentals, `pow`) are marked
//! inexact: no comparison, cast to an integer or bool, rounding, integer division or argmax
//! reads them, since one ulp there can flip a result, and no division by one.

#[path = "random_edges.rs"]
mod edges;

use kiln::{function, Backend, CompileOptions, DType, Graph, Tensor, TensorRef, Var};
use ndarray::{ArrayD, ArrayViewD, IxDyn, Slice};

/// How an argument is laid out in memory (see the module docs).
#[derive(Clone, Debug)]
pub enum Layout {
    Plain,
    /// Stored with its axes permuted (`storage axis i` is logical axis `perm[i]`).
    Permuted(Vec<usize>),
    /// Stored reversed along the marked axes (read with step -1).
    Reversed(Vec<bool>),
    /// Every other element along the marked axes of a storage twice as long.
    Stepped(Vec<bool>),
    /// A window starting at 1 along the marked axes of a storage one longer.
    Window(Vec<bool>),
    /// A broadcast view of a storage with extent 1 on the marked axes.
    Broadcast(Vec<bool>),
}

/// One argument of a call: its storage and how the call sees it.
pub struct Arg {
    pub storage: Tensor,
    pub layout: Layout,
    pub shape: Vec<usize>,
}

fn view_of<'a, T>(a: &'a ArrayD<T>, layout: &Layout, shape: &[usize]) -> ArrayViewD<'a, T> {
    let v = a.view();
    match layout {
        Layout::Plain => v,
        Layout::Permuted(perm) => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            v.permuted_axes(IxDyn(&inv))
        }
        Layout::Reversed(m) => a.slice_each_axis(|ax| {
            if m[ax.axis.index()] {
                Slice::new(0, None, -1)
            } else {
                Slice::from(..)
            }
        }),
        Layout::Stepped(m) => a.slice_each_axis(|ax| {
            if m[ax.axis.index()] {
                Slice::new(0, None, 2)
            } else {
                Slice::from(..)
            }
        }),
        Layout::Window(m) => a.slice_each_axis(|ax| {
            if m[ax.axis.index()] {
                Slice::from(1..)
            } else {
                Slice::from(..)
            }
        }),
        Layout::Broadcast(_) => a.broadcast(IxDyn(shape)).expect("a broadcastable storage"),
    }
}

impl Arg {
    /// The view the call gets.
    pub fn view(&self) -> TensorRef<'_> {
        let (l, s) = (&self.layout, self.shape.as_slice());
        let v = match &self.storage {
            Tensor::Bool(a) => TensorRef::Bool(view_of(a, l, s)),
            Tensor::I32(a) => TensorRef::I32(view_of(a, l, s)),
            Tensor::I64(a) => TensorRef::I64(view_of(a, l, s)),
            Tensor::F32(a) => TensorRef::F32(view_of(a, l, s)),
            Tensor::F64(a) => TensorRef::F64(view_of(a, l, s)),
            Tensor::F16(a) => TensorRef::F16(view_of(a, l, s)),
            Tensor::BF16(a) => TensorRef::BF16(view_of(a, l, s)),
        };
        debug_assert_eq!(v.shape(), s);
        v
    }
}

/// A program, the arguments to call it on, and what its outputs may be compared with.
pub struct Case {
    pub inputs: Vec<Var>,
    pub outputs: Vec<Var>,
    pub args: Vec<Arg>,
    /// Per output: whether it depends on no inexact value (integers and bools always).
    pub exact: Vec<bool>,
    /// The least precise float dtype of any value (f64 where there is none): a result may
    /// carry a rounding to it.
    pub coarsest: DType,
    /// Whether every input's shape is known (the ahead-of-time path needs it).
    pub static_shapes: bool,
    /// Whether the program has an `ifelse`.
    pub has_ifelse: bool,
    /// Whether the program has a `scan`.
    pub has_scan: bool,
    /// A shared variable the program reads and updates, if any.
    pub shared: Option<Shared>,
    /// How many outputs are steps at the edges of sizes (the last ones): with any, every
    /// backend may refuse the program, as long as all do.
    pub edges: usize,
    /// How many extreme attributes those steps have.
    pub extremes: usize,
    /// How many steps at the edges the type check refused (none became an output).
    pub refused: usize,
}

/// A shared variable of a random program: its first value and its update. Its value after the
/// calls is compared as one more output.
pub struct Shared {
    pub var: Var,
    pub initial: Tensor,
    pub update: Var,
}

impl Case {
    pub fn views(&self) -> Vec<TensorRef<'_>> {
        self.args.iter().map(Arg::view).collect()
    }
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
    fn chance(&mut self, one_in: usize) -> bool {
        self.pick(one_in) == 0
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

const DTYPES: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::Bool,
    DType::F16,
    DType::BF16,
];

/// The gap between 1 and the next value of float dtype `d` (0 for the exact dtypes).
fn ulp(d: DType) -> f64 {
    match d {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => 0.0,
    }
}

/// A deterministic stream of numbers for filling arrays.
struct Fill(u64);

impl Fill {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A float in [-3, 3] in steps of 1/8 (so that small sums and products are exact), or now
    /// and then a special value.
    fn float(&mut self) -> f64 {
        let r = self.next();
        match r % 23 {
            0 => f64::NAN,
            1 => -0.0,
            2 => 0.0,
            3 if r.is_multiple_of(5) => f64::INFINITY,
            4 if r.is_multiple_of(5) => f64::NEG_INFINITY,
            _ => ((r >> 8) % 49) as f64 / 8.0 - 3.0,
        }
    }
    fn int(&mut self) -> i64 {
        (self.next() % 9) as i64 - 4
    }
}

/// An array of `shape` filled from `fill`.
fn array(dtype: DType, shape: &[usize], fill: &mut Fill) -> Tensor {
    let sh = IxDyn(shape);
    match dtype {
        DType::F32 => Tensor::F32(ArrayD::from_shape_simple_fn(sh, || fill.float() as f32)),
        DType::F64 => Tensor::F64(ArrayD::from_shape_simple_fn(sh, || fill.float())),
        DType::I32 => Tensor::I32(ArrayD::from_shape_simple_fn(sh, || fill.int() as i32)),
        DType::I64 => Tensor::I64(ArrayD::from_shape_simple_fn(sh, || fill.int())),
        DType::Bool => Tensor::Bool(ArrayD::from_shape_simple_fn(sh, || {
            fill.next().is_multiple_of(2)
        })),
        DType::F16 => Tensor::F16(ArrayD::from_shape_simple_fn(sh, || {
            kiln::ir::f16_of(fill.float())
        })),
        DType::BF16 => Tensor::BF16(ArrayD::from_shape_simple_fn(sh, || {
            kiln::ir::bf16_of(fill.float())
        })),
    }
}

/// An argument of logical `shape`, laid out as `r` chooses.
fn argument(r: &mut Bytes, dtype: DType, shape: &[usize], fill: &mut Fill) -> Arg {
    let rank = shape.len();
    let mask = |r: &mut Bytes| -> Vec<bool> { (0..rank).map(|_| r.chance(2)).collect() };
    let layout = if rank == 0 {
        Layout::Plain
    } else {
        match r.pick(8) {
            0 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, r.pick(i + 1));
                }
                Layout::Permuted(perm)
            }
            1 => Layout::Reversed(mask(r)),
            2 => Layout::Stepped(mask(r)),
            3 => Layout::Window(mask(r)),
            4 => Layout::Broadcast(mask(r)),
            _ => Layout::Plain,
        }
    };
    let storage_shape: Vec<usize> = match &layout {
        Layout::Plain | Layout::Reversed(_) => shape.to_vec(),
        Layout::Permuted(perm) => perm.iter().map(|&p| shape[p]).collect(),
        Layout::Stepped(m) => (0..rank)
            .map(|a| {
                if m[a] {
                    (2 * shape[a]).saturating_sub(1)
                } else {
                    shape[a]
                }
            })
            .collect(),
        Layout::Window(m) => (0..rank).map(|a| shape[a] + m[a] as usize).collect(),
        Layout::Broadcast(m) => (0..rank)
            .map(|a| if m[a] { 1.min(shape[a]) } else { shape[a] })
            .collect(),
    };
    Arg {
        storage: array(dtype, &storage_shape, fill),
        layout,
        shape: shape.to_vec(),
    }
}

/// The shape a value of `rank` takes on the base's trailing axes, with extent 1 where `ones`.
fn fit(base: &[usize], rank: usize, ones: &[bool]) -> Vec<usize> {
    let lead = base.len() - rank;
    (0..rank)
        .map(|k| if ones[k] { 1 } else { base[lead + k] })
        .collect()
}

/// Whether the program may reduce with `max`/`min`/argmax over `shape`'s axes: no empty ones.
fn has_empty(shape: &[usize]) -> bool {
    shape.contains(&0)
}

/// Builds a random program from `data` (any bytes make a well-typed program).
pub fn build(data: &[u8]) -> Case {
    let mut r = Bytes { data, at: 0 };
    let rank = r.pick(6);
    let base: Vec<usize> = (0..rank)
        .map(|_| match r.pick(16) {
            0 => 0,
            1..=4 => 1,
            k => 2 + k % 3,
        })
        .collect();
    let g = Graph::new();
    let mut fill =
        Fill(0x5eed ^ data.len() as u64 ^ ((data.first().copied().unwrap_or(0) as u64) << 8));
    let n_inputs = 1 + r.pick(3);
    let mut pool: Vec<Val> = Vec::new();
    let mut inputs = Vec::new();
    let mut args = Vec::new();
    let mut static_shapes = true;
    for i in 0..n_inputs {
        let dtype = DTYPES[r.pick(DTYPES.len())];
        let vrank = if i == 0 {
            rank
        } else {
            rank - r.pick(rank + 1)
        };
        let ones: Vec<bool> = (0..vrank).map(|_| r.chance(3)).collect();
        let shape = fit(&base, vrank, &ones);
        let lead = rank - vrank;
        // `?` only where the extent is the base's: such a dim never needs to broadcast.
        let dims: Vec<Option<i64>> = (0..vrank)
            .map(|k| {
                let unknown = shape[k] == base[lead + k] && r.chance(3);
                static_shapes &= !unknown;
                (!unknown).then_some(shape[k] as i64)
            })
            .collect();
        let v = g.input(&format!("in{i}"), dtype, dims);
        args.push(argument(&mut r, dtype, &shape, &mut fill));
        pool.push(Val {
            v: v.clone(),
            exact: true,
        });
        inputs.push(v);
    }
    // Now and then a shared variable the program reads and updates (in place where the
    // optimizer may): of the base shape, or `[k, k]` for an update by a matrix product (the
    // CPU backend fuses those into one GEMM step).
    let product = base.len() >= 2 && r.chance(2);
    let shared = r.chance(3).then(|| {
        let dtype = [DType::F32, DType::F64, DType::F16, DType::BF16][r.pick(4)];
        let k = base.last().copied().unwrap_or(1);
        let shape = if product { vec![k, k] } else { base.clone() };
        let initial = array(dtype, &shape, &mut fill);
        let var = g.shared("state", initial.clone());
        // Its value at the second call is the first call's update, which may be inexact.
        if !product {
            pool.push(Val {
                v: var.clone(),
                exact: false,
            });
        }
        (var, initial)
    });
    let mut ctx = Ctx {
        g: &g,
        base: &base,
        has_ifelse: false,
        has_scan: false,
        fill: &mut fill,
        edges: Vec::new(),
        extremes: 0,
        refused: 0,
    };
    let mut steps = 0;
    while !r.done() && steps < 24 {
        steps += 1;
        let p = pool[r.pick(pool.len())].clone();
        let q = pool[r.pick(pool.len())].clone();
        if let Some(v) = ctx.step(&mut r, &p, &q, &pool) {
            if v.v.check().is_ok() {
                pool.push(v);
            }
        }
    }
    let shared = shared.and_then(|(var, initial)| {
        let dtype = initial.dtype();
        let p = pool
            .iter()
            .rev()
            .find(|v| v.v.ty().dtype.is_float())?
            .clone();
        let q = pool[r.pick(pool.len())].clone();
        let q = if q.v.ty().dtype.is_float() {
            q
        } else {
            p.clone()
        };
        let (update, exact) = if product {
            let n = base.len();
            let (m, k) = (base[n - 2], base[n - 1]);
            let full = |v: &Val| v.v.cast(dtype).broadcast_to(&[m as i64, k as i64]);
            // A product of halves is f32: the update is stored back as the variable's dtype.
            let g = full(&p).t().matmul(&full(&q));
            let step = &var - &(g * 0.25);
            let step = if step.dtype() == dtype {
                step
            } else {
                step.cast(dtype)
            };
            (step, false)
        } else {
            (&var - &(p.v.cast(dtype) * 0.5), p.exact)
        };
        update.check().ok()?;
        Some((
            Shared {
                var,
                initial,
                update,
            },
            exact,
        ))
    });
    let coarsest = pool
        .iter()
        .map(|v| v.v.ty().dtype)
        .filter(|&d| d.is_float())
        .max_by(|&a, &b| ulp(a).total_cmp(&ulp(b)))
        .unwrap_or(DType::F64);
    // The last value, a few others, and every value added up (as f64), so that nothing built
    // is dead.
    let mut outputs = vec![pool[pool.len() - 1].clone()];
    for _ in 0..r.pick(4) {
        outputs.push(pool[r.pick(pool.len())].clone());
    }
    if pool.len() > 1 {
        let mut all = pool[0].v.cast(DType::F64);
        let mut exact = pool[0].exact;
        for v in &pool[1..] {
            all = &all + &v.v.cast(DType::F64);
            exact &= v.exact;
        }
        outputs.push(Val { v: all, exact });
    }
    let edges = ctx.edges.len();
    outputs.append(&mut ctx.edges);
    let mut exact: Vec<bool> = outputs.iter().map(|o| o.exact).collect();
    if let Some((_, e)) = &shared {
        exact.push(*e);
    }
    Case {
        inputs,
        exact,
        shared: shared.map(|(s, _)| s),
        outputs: outputs.into_iter().map(|o| o.v).collect(),
        args,
        coarsest,
        static_shapes,
        has_ifelse: ctx.has_ifelse,
        has_scan: ctx.has_scan,
        edges,
        extremes: ctx.extremes,
        refused: ctx.refused,
    }
}

/// Whether steps at the edges of sizes are drawn: yes, unless `KILN_RANDOM_EDGES=0` (to tell
/// whether a failure comes from them).
pub fn edges_enabled() -> bool {
    std::env::var("KILN_RANDOM_EDGES").map_or(true, |v| v != "0")
}

struct Ctx<'a> {
    g: &'a Graph,
    base: &'a [usize],
    has_ifelse: bool,
    has_scan: bool,
    fill: &'a mut Fill,
    /// Steps at the edges of sizes (`random_edges.rs`): outputs, never operands.
    edges: Vec<Val>,
    /// How many extreme attributes they have.
    extremes: usize,
    /// How many steps at the edges the type check refused.
    refused: usize,
}

/// `q` in `p`'s dtype, where the cast keeps what the comparison needs.
fn like(p: &Val, q: &Val) -> Option<Val> {
    let (dp, dq) = (p.v.ty().dtype, q.v.ty().dtype);
    if dp == dq {
        return Some(q.clone());
    }
    // A float cast to an integer or bool: one ulp apart can land on two integers.
    if !dp.is_float() && dq.is_float() && !q.exact {
        return None;
    }
    Some(Val {
        v: q.v.cast(dp),
        exact: q.exact,
    })
}

/// The known shape of `v` (values here always have one: the base's extents or 1; `?` dims of
/// inputs are the base's).
fn shape_of(v: &Var, base: &[usize]) -> Vec<usize> {
    let ty = v.ty();
    let lead = base.len() - ty.rank();
    ty.shape
        .iter()
        .enumerate()
        .map(|(k, d)| d.unwrap_or(base[lead + k]))
        .collect()
}

impl Ctx<'_> {
    fn step(&mut self, r: &mut Bytes, p: &Val, q: &Val, pool: &[Val]) -> Option<Val> {
        let dt = p.v.ty().dtype;
        let float = dt.is_float();
        let out = |v: Var, exact: bool| Some(Val { v, exact });
        let rank = p.v.ty().rank();
        let shape = shape_of(&p.v, self.base);
        match r.pick(21) {
            // Now and then a step at the edges of sizes, which becomes an output.
            20 if edges_enabled() && r.chance(2) => {
                let before = self.extremes;
                match self.edge(r, p) {
                    Some(e) if e.v.check().is_ok() => self.edges.push(e),
                    // Refused by the type check (which did not panic): not an output.
                    Some(_) => {
                        self.extremes = before;
                        self.refused += 1;
                    }
                    None => self.extremes = before,
                }
                None
            }
            // Unary, by dtype: exact ones on any float, rounding ones on exact values only.
            0 if float => {
                let k = r.pick(12);
                let exact_in = p.exact;
                match k {
                    0 => out(p.v.exp(), false),
                    1 => out(p.v.abs().log1p(), false),
                    2 => out(p.v.sin(), false),
                    3 => out(p.v.tanh(), false),
                    4 => out(p.v.abs().sqrt(), false),
                    5 => out(p.v.sigmoid(), false),
                    6 => out(p.v.erf(), false),
                    7 => out(p.v.relu(), p.exact),
                    8 if exact_in => out(p.v.floor(), true),
                    9 if exact_in => out(p.v.round(), true),
                    10 if exact_in => out(p.v.sign(), true),
                    _ => out(p.v.square(), p.exact),
                }
            }
            0 if dt == DType::Bool => out(p.v.logical_not(), true),
            0 => out(
                match r.pick(4) {
                    0 => -&p.v,
                    1 => p.v.abs(),
                    2 => p.v.sign(),
                    _ => p.v.square(),
                },
                true,
            ),
            // Arithmetic on two values of one dtype.
            1..=3 if dt != DType::Bool => {
                let q = like(p, q)?;
                let exact = p.exact && q.exact;
                out(
                    match r.pick(7) {
                        0 => &p.v + &q.v,
                        1 => &p.v - &q.v,
                        2 => &p.v * &q.v,
                        3 => p.v.maximum(&q.v),
                        4 => p.v.minimum(&q.v),
                        5 if float && q.exact => &p.v / &q.v,
                        6 if float => {
                            return out(p.v.abs().pow(&q.v), false);
                        }
                        _ => p.v.maximum(&q.v),
                    },
                    exact,
                )
            }
            1..=3 => {
                let q = like(p, q)?;
                out(
                    match r.pick(4) {
                        0 => p.v.and(&q.v),
                        1 => p.v.or(&q.v),
                        2 => p.v.ne(&q.v),
                        _ => p.v.eq(&q.v),
                    },
                    true,
                )
            }
            // Integer (and exact float) division and mod, by zero too.
            4 if dt != DType::Bool && p.exact && q.exact => {
                let q = like(p, q)?;
                let v = if r.chance(2) {
                    p.v.floordiv(&q.v)
                } else {
                    p.v.modulo(&q.v)
                };
                out(v, true)
            }
            // Comparisons and select, on exact values only.
            5 if p.exact && q.exact && dt != DType::Bool => {
                let q = like(p, q)?;
                let c = match r.pick(6) {
                    0 => p.v.gt(&q.v),
                    1 => p.v.le(&q.v),
                    2 => p.v.lt(&q.v),
                    3 => p.v.ge(&q.v),
                    4 => p.v.ne(&q.v),
                    _ => p.v.eq(&q.v),
                };
                out(c, true)
            }
            6 => {
                let c = pool.iter().rev().find(|v| v.v.ty().dtype == DType::Bool)?;
                let q = like(p, q)?;
                out(kiln::select(&c.v, &p.v, &q.v), p.exact && q.exact)
            }
            // Casts between every pair of dtypes.
            7 => {
                let to = DTYPES[r.pick(DTYPES.len())];
                if !to.is_float() && float && !p.exact {
                    return None;
                }
                out(p.v.cast(to), p.exact)
            }
            // Reductions over any subset of axes, back to a shape that broadcasts to the base.
            9 if rank >= 2 && r.chance(2) => self.row_run(r, p, &shape),
            8 | 9 => self.reduction(r, p, &shape),
            // Views.
            10 => out(p.v.broadcast_to(&i64s(self.base)), p.exact),
            11 if rank >= 1 => {
                let ranges: Vec<(Option<i64>, Option<i64>, i64)> = (0..rank)
                    .map(|_| {
                        if r.chance(2) {
                            (None, None, -1)
                        } else {
                            (None, None, 1)
                        }
                    })
                    .collect();
                out(p.v.slice(&ranges), p.exact)
            }
            12 if rank >= 1 => {
                // Transposed, an op on the transposed value, and back.
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, r.pick(i + 1));
                }
                let mut inv = vec![0i64; rank];
                for (i, &k) in perm.iter().enumerate() {
                    inv[k] = i as i64;
                }
                // Odd places counted from the end, as numpy allows (no draw of their own, so
                // the programs a seed makes do not change).
                let perm: Vec<i64> = (perm.iter().enumerate())
                    .map(|(i, &k)| k as i64 - if i % 2 == 1 { rank as i64 } else { 0 })
                    .collect();
                let t = p.v.transpose(&perm);
                let (t, exact) = match r.pick(3) {
                    0 if dt != DType::Bool => (&t + &t, p.exact),
                    1 if float => (t.tanh(), false),
                    _ => (t, p.exact),
                };
                out(t.transpose(&inv), exact)
            }
            13 => {
                // Flattened and back, or through expand_dims and squeeze.
                let flat = p.v.reshape(&[-1]);
                let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                let v = if r.chance(2) || shape.contains(&0) {
                    flat.reshape(&dims)
                } else {
                    let e = p.v.expand_dims(&[0, -1]);
                    e.squeeze(Some(&[0, -1]))
                };
                out(v, p.exact)
            }
            14 if rank >= 1 => {
                // Rolled by one along an axis: slices concatenated.
                let ax = r.pick(rank);
                let n = shape[ax] as i64;
                if n < 2 {
                    return None;
                }
                let mut first = vec![(None, None, 1); rank];
                let mut rest = vec![(None, None, 1); rank];
                first[ax] = (Some(0), Some(1), 1);
                rest[ax] = (Some(1), None, 1);
                let (a, b) = (p.v.slice(&first), p.v.slice(&rest));
                out(kiln::concat(&[&b, &a], ax as i64), p.exact)
            }
            // Batched matmul back to the base shape, batch dims broadcast.
            15 if float && self.base.len() >= 2 => {
                let q = like(p, q)?;
                let b = self.base;
                let n = b.len();
                let (m, k) = (b[n - 2], b[n - 1]);
                // Each operand keeps its own (possibly broadcast) batch dims.
                let lead = |v: &Var| -> Vec<usize> {
                    let s = shape_of(v, b);
                    let l = s.len().saturating_sub(2);
                    let mut out: Vec<usize> = s[..l].to_vec();
                    if s.len() < 2 {
                        out.clear();
                    }
                    out
                };
                let (lp, lq) = (lead(&p.v), lead(&q.v));
                let pa = p.v.broadcast_to(&i64s(&[lp.clone(), vec![m, k]].concat()));
                let qa = q.v.broadcast_to(&i64s(&[lq.clone(), vec![m, k]].concat()));
                let mut qt_perm: Vec<i64> = (0..lq.len() as i64 + 2).collect();
                let l = qt_perm.len();
                qt_perm.swap(l - 1, l - 2);
                let qt = qa.transpose(&qt_perm);
                let v = pa.matmul(&qt).matmul(&qa);
                out(v, false)
            }
            // Elementwise chains that fuse.
            16 if float => {
                let q = like(p, q)?;
                out((&p.v * 0.5 + &q.v).tanh() * &p.v, false)
            }
            // A constant, or a random draw (every backend's bits: the same counter-based
            // streams), of a shape that broadcasts.
            17 => {
                let crank = r.pick(rank + 1);
                let ones: Vec<bool> = (0..crank).map(|_| r.chance(2)).collect();
                let cshape = fit(self.base, crank, &ones);
                let seed = r.pick(1 << 8) as u64;
                let c = match (r.pick(4), dt) {
                    (0, DType::F32 | DType::F64) => {
                        self.g.normal(seed, &i64s(&cshape), dt, 0.5, 2.0)
                    }
                    (1, DType::F32 | DType::F64) => {
                        self.g.uniform(seed, &i64s(&cshape), dt, -1.0, 1.0)
                    }
                    (0 | 1, DType::Bool | DType::I32 | DType::I64) => {
                        self.g.bernoulli(seed, &i64s(&cshape), dt, 0.4)
                    }
                    _ => self.g.constant(array(dt, &cshape, self.fill)),
                };
                let v = match dt {
                    DType::Bool => p.v.or(&c),
                    _ => &p.v + &c,
                };
                out(v, p.exact)
            }
            // Lazy ifelse on a condition computed from exact values.
            18 => self.conditional(r, p, q, pool),
            // A scan over p's leading axis.
            19 if rank >= 1 => self.looped(r, p),
            _ if dt == DType::Bool => {
                let q = like(p, q)?;
                out(p.v.or(&q.v), true)
            }
            _ => {
                let q = like(p, q)?;
                out(&p.v + &q.v, p.exact && q.exact)
            }
        }
    }

    /// A softmax-like run over the rows (the trailing axes after one or more leading ones): a
    /// reduction kept as 1s, combined with `p`, reduced again and combined: the steps a row
    /// group takes (and the GPU's row kernel, one block per row, which nothing else here
    /// would give).
    fn row_run(&mut self, r: &mut Bytes, p: &Val, shape: &[usize]) -> Option<Val> {
        let kept = 1 + r.pick(shape.len() - 1);
        if shape[kept..].contains(&0) {
            return None;
        }
        let axes: Vec<i64> = (kept as i64..shape.len() as i64).collect();
        let a = Some(axes.as_slice());
        let dt = p.v.ty().dtype;
        let (v, exact) = match dt {
            DType::Bool => {
                let y = p.v.or(p.v.any(a, true));
                (y.or(y.all(a, true)), true)
            }
            // Softmax, or a normalization by the mean square.
            _ if dt.is_float() && r.chance(2) => {
                let e = (&p.v - &p.v.max(a, true)).exp();
                (&e / &e.sum(a, true), false)
            }
            _ if dt.is_float() => {
                let c = &p.v - &p.v.mean(a, true);
                (&c * &(&c * &c).mean(a, true), false)
            }
            _ => {
                let d = &p.v - &p.v.max(a, true);
                (&d - &d.sum(a, true), p.exact)
            }
        };
        Some(Val { v, exact })
    }

    fn reduction(&mut self, r: &mut Bytes, p: &Val, shape: &[usize]) -> Option<Val> {
        let dt = p.v.ty().dtype;
        let rank = shape.len();
        let keep = r.chance(2);
        let mut axes: Vec<usize> = (0..rank).filter(|_| r.chance(2)).collect();
        let all_axes = r.chance(4);
        if all_axes {
            axes = (0..rank).collect();
        }
        let empty = axes.iter().any(|&a| shape[a] == 0) || (all_axes && has_empty(shape));
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let axes_arg = if all_axes { None } else { Some(ax.as_slice()) };
        let kind = r.pick(8);
        let (v, exact) = match kind {
            // Max and min need a non-empty axis; argmax an exact value and one axis.
            0 | 1 if empty => return None,
            0 => (p.v.max(axes_arg, keep), p.exact),
            1 => (p.v.min(axes_arg, keep), p.exact),
            2 | 3 if dt == DType::Bool => {
                let v = if kind == 2 {
                    p.v.all(axes_arg, keep)
                } else {
                    p.v.any(axes_arg, keep)
                };
                (v, true)
            }
            2 => (p.v.sum(axes_arg, keep), p.exact),
            3 => (p.v.prod(axes_arg, keep), p.exact && !dt.is_float()),
            4 if dt != DType::Bool => (p.v.mean(axes_arg, keep), false),
            5 | 6 if p.exact && !empty && rank >= 1 && dt != DType::Bool => {
                let a = r.pick(rank);
                if shape[a] == 0 {
                    return None;
                }
                axes = vec![a];
                let x = if r.chance(2) { -&p.v } else { p.v.clone() };
                let v = if kind == 5 {
                    x.argmax(Some(a as i64), keep)
                } else {
                    x.argmin(Some(a as i64), keep)
                };
                (v, true)
            }
            // A sum of a fused producer.
            _ if dt.is_float() => {
                let e = p.v.tanh();
                (e.sum(axes_arg, keep), false)
            }
            _ => (p.v.sum(axes_arg, keep), p.exact),
        };
        // Back to a shape that broadcasts to the base: the reduced axes again, as 1s.
        let v = if keep || axes.is_empty() && !all_axes {
            v
        } else {
            let back: Vec<i64> = if all_axes && kind != 5 && kind != 6 {
                (0..rank as i64).collect()
            } else {
                axes.iter().map(|&a| a as i64).collect()
            };
            if back.is_empty() {
                v
            } else {
                v.expand_dims(&back)
            }
        };
        Some(Val { v, exact })
    }

    /// A `scan` over `p`'s leading axis (either way), its carry starting as `p` summed (or
    /// `any`) over that axis, each step combining the carry with the slice as a branch kind
    /// does and stacking another combination, the new carry or the slice: the result has
    /// `p`'s shape.
    fn looped(&mut self, r: &mut Bytes, p: &Val) -> Option<Val> {
        let dt = p.v.ty().dtype;
        let init = match dt {
            DType::Bool => p.v.any(Some(&[0]), false),
            _ => p.v.sum(Some(&[0]), false),
        };
        let kinds = [
            BRANCHES[r.pick(BRANCHES.len())],
            BRANCHES[r.pick(BRANCHES.len())],
        ];
        // What it stacks: another combination, or (which the host runs without a copy of its
        // own) the new carry itself or the step's slice itself.
        let stacks = r.pick(4);
        let body = move |c: &[Var], x: &[Var]| {
            let next = branch(kinds[0], &c[0], &x[0]);
            let y = match stacks {
                0 => next.clone(),
                1 => x[0].clone(),
                _ => branch(kinds[1], &next, &x[0]),
            };
            (vec![next], vec![y])
        };
        let (_, stacked) = if r.chance(2) {
            kiln::scan_reverse(&[&init], &[&p.v], body)
        } else {
            kiln::scan(&[&init], &[&p.v], body)
        };
        self.has_scan = true;
        let v = stacked.into_iter().next()?;
        v.check().ok()?;
        // A float sum's rounding depends on its order.
        Some(Val {
            v,
            exact: p.exact && !dt.is_float(),
        })
    }

    fn conditional(&mut self, r: &mut Bytes, p: &Val, q: &Val, pool: &[Val]) -> Option<Val> {
        // A 0-d bool from exact values: an `any` of a bool value, or two sums compared.
        let c = match pool.iter().find(|v| v.v.ty().dtype == DType::Bool) {
            Some(b) if r.chance(2) => b.v.any(None, false),
            _ if p.exact && q.exact && p.v.ty().dtype != DType::Bool => {
                let q2 = like(p, q)?;
                p.v.sum(None, false).gt(q2.v.sum(None, false))
            }
            _ => return None,
        };
        let q = like(p, q)?;
        let kinds = [
            BRANCHES[r.pick(BRANCHES.len())],
            BRANCHES[r.pick(BRANCHES.len())],
        ];
        // Both branches must yield one type; tried outside first (dead nodes, never run).
        let (t, e) = (branch(kinds[0], &p.v, &q.v), branch(kinds[1], &q.v, &p.v));
        if t.check().is_err() || e.check().is_err() || t.ty() != e.ty() {
            return None;
        }
        self.has_ifelse = true;
        // The branches' values are built inside the closures: they are the regions, and only
        // the taken one runs.
        let (pv, qv) = (p.v.clone(), q.v.clone());
        let (pv2, qv2) = (p.v.clone(), q.v.clone());
        let outs = kiln::ifelse(
            &c,
            move || vec![branch(kinds[0], &pv, &qv)],
            move || vec![branch(kinds[1], &qv2, &pv2)],
        );
        Some(Val {
            v: outs.into_iter().next()?,
            exact: p.exact && q.exact,
        })
    }
}

/// What a branch of a generated `ifelse` computes from its two values.
#[derive(Clone, Copy, Debug)]
enum Branch {
    Add,
    Mul,
    Max,
    Neg,
}

const BRANCHES: [Branch; 4] = [Branch::Add, Branch::Mul, Branch::Max, Branch::Neg];

/// A branch's body on values `a` and `b` of one dtype (`or`, `and` for bools).
fn branch(kind: Branch, a: &Var, b: &Var) -> Var {
    if a.ty().dtype == DType::Bool {
        return match kind {
            Branch::Add | Branch::Max => a.or(b),
            Branch::Mul => a.and(b),
            Branch::Neg => a.or(b).logical_not(),
        };
    }
    match kind {
        Branch::Add => a + b,
        Branch::Mul => a * b,
        Branch::Max => a.maximum(b),
        Branch::Neg => -&(a + b),
    }
}

/// Whether two results of one program agree: integers and bools exactly; exact floats bit for
/// bit when `bits` (both sides ran the same ops, unoptimized: signed zeros must match too), else
/// within a tolerance for the few ulps a chain of inexact steps (or a rewrite's rounding) may
/// grow. NaN matches NaN.
/// Whether `a` and `b` agree: bit for bit where `bits` and the value is `exact`, else within a
/// relative tolerance, or within a few units in the last place of `scale` (the largest
/// magnitude among the program's results): a sum whose terms cancel carries its largest
/// term's rounding (an `exp` of 7e8 one ulp apart on two backends leaves 1.2e-7 in a result
/// of 38 from which it was subtracted), which no tolerance relative to the result covers.
pub fn agree(
    a: &Tensor,
    b: &Tensor,
    exact: bool,
    bits: bool,
    coarsest: DType,
    scale: f64,
) -> Result<(), String> {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return Err(format!(
            "{}{:?} vs {}{:?}",
            a.dtype(),
            a.shape(),
            b.dtype(),
            b.shape()
        ));
    }
    // Rounding to the coarsest float of the program bounds how far a result may drift.
    let eps = if a.dtype().is_float() {
        ulp(a.dtype()).max(ulp(coarsest))
    } else {
        0.0
    };
    let tol = match eps {
        0.0 => 0.0,
        e if e == f64::EPSILON => 1e-9,
        e if e == f32::EPSILON as f64 => 2e-4,
        e => 8.0 * e,
    };
    let bitwise = bits && exact;
    let cancelled = 16.0 * eps * scale;
    for (i, (x, y)) in a.to_f64_vec().into_iter().zip(b.to_f64_vec()).enumerate() {
        let same = (x.is_nan() && y.is_nan())
            || (x == y && (!bitwise || x.is_sign_negative() == y.is_sign_negative()))
            || (!bitwise
                && x.is_finite()
                && y.is_finite()
                && ((x - y).abs() <= tol * x.abs().max(y.abs()).max(1.0)
                    || (x - y).abs() <= cancelled));
        if !same {
            return Err(format!("element {i}: {x:?} vs {y:?}"));
        }
    }
    Ok(())
}

/// Compiles the case for `backend` (optimizer on or off) and calls it twice: the second call
/// runs on the buffers the first left (pools, in-place steps) and writes into the first call's
/// output arrays (`call_into`). Returns the second call's outputs.
pub fn run(case: &Case, backend: Backend, optimize: bool) -> Result<Vec<Tensor>, String> {
    let ins: Vec<&Var> = case.inputs.iter().collect();
    let outs: Vec<&Var> = case.outputs.iter().collect();
    let mut builder = function(&ins, &outs).options(CompileOptions {
        backend: Some(backend),
        optimize,
        dump: Default::default(),
        ..Default::default()
    });
    if let Some(s) = &case.shared {
        builder = builder.update(&s.var, &s.update);
        s.var
            .set_value(s.initial.clone())
            .map_err(|e| e.to_string())?;
    }
    let f = builder
        .compile()
        .map_err(|e| format!("{backend} does not compile a random program: {e}"))?;
    let args = case.views();
    let mut outs = f
        .call(&args)
        .map_err(|e| format!("{backend} fails on a random program: {e}"))?;
    // The second call writes into the first call's arrays (the caller's buffers path).
    f.call_into(&args, &mut outs)
        .map_err(|e| format!("{backend} fails on a random program: {e}"))?;
    if let Some(s) = &case.shared {
        outs.push(s.var.value().ok_or("the shared variable has no value")?);
    }
    Ok(outs)
}

/// The program in the text form, for failure messages.
pub fn text(case: &Case) -> String {
    let updates: Vec<(Var, Var)> = case
        .shared
        .iter()
        .map(|s| (s.var.clone(), s.update.clone()))
        .collect();
    match kiln::graph::to_ssa("case", &case.inputs, &case.outputs, &updates) {
        Ok(s) => kiln::ir::text::print_func(&s.func),
        Err(e) => format!("(no text: {e})"),
    }
}

/// How the arguments are laid out, for failure messages.
pub fn layouts(case: &Case) -> String {
    case.args
        .iter()
        .map(|a| format!("{:?} {:?}", a.shape, a.layout))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Compares `got` with `want` output by output.
pub fn compare(case: &Case, want: &[Tensor], got: &[Tensor], bits: bool) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} outputs vs {}", want.len(), got.len()));
    }
    let scale = want
        .iter()
        .filter(|t| t.dtype().is_float())
        .flat_map(|t| t.to_f64_vec())
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        agree(a, b, case.exact[i], bits, case.coarsest, scale)
            .map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// Compares what two backends made of a case: the same outputs, or a refusal by both (one
/// line each, and at the same stage: both when compiling or both when calling). Only a
/// program with steps at the edges of sizes may be refused; the ordinary ones always run.
pub fn same_outcome(
    case: &Case,
    want: &Result<Vec<Tensor>, String>,
    got: &Result<Vec<Tensor>, String>,
    bits: bool,
) -> Result<(), String> {
    match (want, got) {
        (Ok(w), Ok(g)) => compare(case, w, g, bits),
        (Err(w), Err(g)) if case.edges > 0 => {
            for e in [w, g] {
                if e.lines().count() != 1 || e.contains("panicked") {
                    return Err(format!("a refusal that is not one line: {e}"));
                }
            }
            if stage(w) != stage(g) {
                return Err(format!("refused at different stages:\n  {w}\n  {g}"));
            }
            Ok(())
        }
        (Err(w), _) => Err(format!("the reference: {w}")),
        (Ok(_), Err(g)) => Err(format!("refused where the reference runs: {g}")),
    }
}

/// The stage `run`'s error names: compiling or calling.
fn stage(error: &str) -> &'static str {
    if error.contains("does not compile") {
        "compile"
    } else {
        "call"
    }
}

/// Calls a case's function (one with a shared variable) from `threads` threads, `calls` times
/// each, while this thread reads its state again and again: every state read must be one that
/// the same number of calls made one at a time leaves (the shared variable and the ops' state,
/// bit for bit), in order, and the last the state after all of them. Beside the case's own
/// variable the function counts its calls in a second one, so that a state whose variables
/// come from different calls is seen. Returns how many states were read.
pub fn whole_state_under_threads(
    case: &Case,
    backend: Backend,
    threads: usize,
    calls: usize,
) -> Result<usize, String> {
    let s = case
        .shared
        .as_ref()
        .ok_or("the case has no shared variable")?;
    let ins: Vec<&Var> = case.inputs.iter().collect();
    let outs: Vec<&Var> = case.outputs.iter().collect();
    s.var
        .set_value(s.initial.clone())
        .map_err(|e| e.to_string())?;
    let counter = s
        .var
        .graph()
        .shared("calls", Tensor::F64(ndarray::arr0(0.0).into_dyn()));
    let f = function(&ins, &outs)
        .update(&s.var, &s.update)
        .update(&counter, &(&counter + 1.0))
        .backend(backend)
        .compile()
        .map_err(|e| format!("{backend}: {e}"))?;
    // Owned copies: the views borrow the case, which holds the graph (not shared by threads).
    let args: Vec<Tensor> = case.views().iter().map(|v| v.to_owned()).collect();
    let views = || args.iter().map(|t| t.view()).collect::<Vec<_>>();
    let entries = |f: &kiln::Function| {
        f.try_state()
            .map(|s| s.entries())
            .map_err(|e| e.to_string())
    };
    let start = f.try_state().map_err(|e| e.to_string())?;
    let mut states = vec![start.entries()];
    for _ in 0..threads * calls {
        f.call(&views()).map_err(|e| format!("{backend}: {e}"))?;
        states.push(entries(&f)?);
    }
    f.set_state(&start).map_err(|e| e.to_string())?;
    let same = |a: &[(String, Tensor)], b: &[(String, Tensor)]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|((na, ta), (nb, tb))| {
                na == nb && agree(ta, tb, true, true, DType::F64, 0.0).is_ok()
            })
    };
    if !same(&entries(&f)?, &states[0]) {
        return Err("set_state did not restore the first state".into());
    }
    let running = std::sync::atomic::AtomicUsize::new(threads);
    let (f, views) = (&f, &views);
    std::thread::scope(|scope| {
        let callers: Vec<_> = (0..threads)
            .map(|_| {
                let running = &running;
                scope.spawn(move || {
                    let r = (0..calls).try_for_each(|_| f.call(&views()).map(drop));
                    running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    r.map_err(|e| format!("{backend}, a caller: {e}"))
                })
            })
            .collect();
        let (mut at, mut read) = (0, 0);
        let mut result = Ok(());
        while result.is_ok() && running.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            let now = entries(f)?;
            read += 1;
            match (at..states.len()).find(|&k| same(&now, &states[k])) {
                Some(k) => at = k,
                None => {
                    result = Err(format!(
                        "{backend}: a state read while {threads} threads call is none that \
                         calls made one at a time leave after {at} or more calls: {}",
                        nearest_difference(&now, &states[at..])
                    ))
                }
            }
        }
        for c in callers {
            c.join()
                .map_err(|_| format!("{backend}: a caller panicked"))??;
        }
        result?;
        if !same(&entries(f)?, &states[threads * calls]) {
            return Err(format!(
                "{backend}: after {} calls from {threads} threads the state is not the one as \
                 many calls made one at a time leave",
                threads * calls
            ));
        }
        Ok(read)
    })
}

/// For a failure report: how a torn state `now` differs from the state in `states` it is
/// nearest to (the one with the most entries equal).
fn nearest_difference(now: &[(String, Tensor)], states: &[Vec<(String, Tensor)>]) -> String {
    let equal = |a: &(String, Tensor), b: &(String, Tensor)| {
        a.0 == b.0 && agree(&a.1, &b.1, true, true, DType::F64, 0.0).is_ok()
    };
    let nearest = (states.iter().enumerate())
        .max_by_key(|(_, s)| s.iter().zip(now).filter(|(a, b)| equal(a, b)).count());
    let Some((k, state)) = nearest else {
        return "no state to compare with".into();
    };
    let differ: Vec<String> = (now.iter().zip(state))
        .filter(|(a, b)| !equal(a, b))
        .map(|(a, b)| format!("`{}` is {:?}, not {:?}", a.0, a.1, b.1))
        .collect();
    format!(
        "nearest the state after {k} more calls, where {}",
        differ.join("; ")
    )
}

/// For a failure report: the first instruction (top level) whose value the unoptimized
/// `backend` computes differently from the reference, found by returning every value.
pub fn first_difference(case: &Case, backend: Backend) -> String {
    let Ok(ssa) = kiln::graph::to_ssa("case", &case.inputs, &case.outputs, &[]) else {
        return String::new();
    };
    let mut func = ssa.func;
    let values: Vec<kiln::ir::Value> = func
        .body
        .iter()
        .flat_map(|i| i.results.iter().copied())
        .collect();
    func.outputs = values.clone();
    let exact_all = case.exact.iter().all(|&e| e);
    let run = |b: Backend| -> Result<Vec<Tensor>, String> {
        let opts = CompileOptions {
            backend: Some(b),
            optimize: false,
            dump: Default::default(),
            ..Default::default()
        };
        let f = kiln::compile_func(func.clone(), &opts).map_err(|e| e.to_string())?;
        // A shared variable the program reads is one more parameter here.
        let mut args = case.views();
        if let Some(s) = case
            .shared
            .as_ref()
            .filter(|_| func.params.len() > args.len())
        {
            args.push(s.initial.view());
        }
        f.call(&args).map_err(|e| e.to_string())
    };
    let (Ok(want), Ok(got)) = (run(Backend::Interp), run(backend)) else {
        return "(could not run every value)".into();
    };
    let text = kiln::ir::text::print_func(&func);
    // The top-level instruction of each value (one has several results: a scan's).
    let inst_of: Vec<usize> = (func.body.iter().enumerate())
        .flat_map(|(n, i)| std::iter::repeat_n(n, i.results.len()))
        .collect();
    for (k, (a, b)) in want.iter().zip(&got).enumerate() {
        if let Err(e) = agree(a, b, exact_all, false, case.coarsest, 0.0) {
            // That instruction's line (the printer names values its own way).
            let line = text
                .lines()
                .filter(|l| l.starts_with("  %"))
                .nth(inst_of[k])
                .unwrap_or("");
            return format!(
                "first value that differs ({:?}: {e}):\n  {}",
                a.shape(),
                line.trim()
            );
        }
    }
    "every value agrees when all are outputs".into()
}

/// A shape as the graph builders take it.
fn i64s(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}
