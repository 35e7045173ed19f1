//! Random programs of the index ops (`take`, `scatter_add`, `scatter_set`, `cumsum`,
//! `cumprod`, `take_along_axis`, `sort`, `argsort`, `one_hot`) on every backend against
//! references written with ndarray's own indexing (`select`, `index_axis_mut`,
//! `accumulate_axis_inplace`, `lanes`): arrays of rank 1 to 5 (index results up to
//! rank 5, `one_hot` from rank-0 indices), empty dims, every dtype each op takes, i32 and i64
//! indices (negative ones included), and inputs given row-major, with their axes reversed (a
//! transposed view) or reversed along one axis (a negative stride).

mod common;
use common::{backends_with_gpu_host, Rng};
use kiln::{function, scatter_add, scatter_set, DType, Graph, Tensor, TensorRef};
use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};

/// How an input reaches the function.
#[derive(Clone, Copy, Debug)]
enum Layout {
    RowMajor,
    /// A transposed view of a row-major array of the reversed shape.
    Transposed,
    /// A view reversed along one axis (negative stride).
    Reversed(usize),
}

/// An array of `shape` holding `vals` in logical order, stored as `layout` says (`view` gives
/// the logical array back as a view of it).
fn stored<T: Clone>(shape: &[usize], vals: Vec<T>, layout: Layout) -> ArrayD<T> {
    let logical = ArrayD::from_shape_vec(IxDyn(shape), vals).unwrap();
    match layout {
        Layout::RowMajor => logical,
        // Owned arrays in the permuted memory order: the view taken later undoes it.
        Layout::Transposed => logical.reversed_axes().as_standard_layout().to_owned(),
        Layout::Reversed(a) => {
            let mut r = logical;
            r.invert_axis(Axis(a));
            r.as_standard_layout().to_owned()
        }
    }
}

/// The logical view of an array `stored` made.
fn view<T>(a: &ArrayD<T>, layout: Layout) -> ArrayViewD<'_, T> {
    match layout {
        Layout::RowMajor => a.view(),
        Layout::Transposed => a.view().reversed_axes(),
        Layout::Reversed(ax) => {
            let mut v = a.view();
            v.invert_axis(Axis(ax));
            v
        }
    }
}

fn ref_take<T: Clone>(x: &ArrayViewD<T>, pos: &[usize], axis: usize, idx: &[usize]) -> ArrayD<T> {
    let mut shape = x.shape()[..axis].to_vec();
    shape.extend(idx);
    shape.extend(&x.shape()[axis + 1..]);
    let picked = x.select(Axis(axis), pos);
    ArrayD::from_shape_vec(IxDyn(&shape), picked.iter().cloned().collect()).unwrap()
}

/// numpy's scatters on a copy of `x`: `combine(element, update)` at each position in order
/// (`add.at` adds, `x[.., pos, ..] = upd` sets: the last write stays).
fn ref_scatter<T: Elem>(
    x: &ArrayViewD<T>,
    pos: &[usize],
    axis: usize,
    upd: &ArrayViewD<T>,
    combine: impl Fn(T, T) -> T,
) -> ArrayD<T> {
    let mut out = x.to_owned();
    let mut flat_shape = x.shape().to_vec();
    flat_shape[axis] = pos.len();
    let upd = ArrayD::from_shape_vec(IxDyn(&flat_shape), upd.iter().copied().collect()).unwrap();
    for (j, &p) in pos.iter().enumerate() {
        let mut dst = out.index_axis_mut(Axis(axis), p);
        dst.zip_mut_with(&upd.index_axis(Axis(axis), j), |d, &u| *d = combine(*d, u));
    }
    out
}

fn ref_cumsum<T: Elem>(x: &ArrayViewD<T>, axis: usize) -> ArrayD<T> {
    let mut out = x.to_owned();
    out.accumulate_axis_inplace(Axis(axis), |&prev, cur| *cur = prev.add(*cur));
    out
}

fn ref_cumprod<T: Elem>(x: &ArrayViewD<T>, axis: usize) -> ArrayD<T> {
    let mut out = x.to_owned();
    out.accumulate_axis_inplace(Axis(axis), |&prev, cur| *cur = prev.mul(*cur));
    out
}

/// numpy `take_along_axis`: `out[i] = x[i with i[axis] replaced by pos[i]]`, `x` and `pos`
/// broadcast (size-1 dims stretch) on the other axes.
fn ref_take_along<T: Copy>(x: &ArrayViewD<T>, pos: &ArrayD<usize>, axis: usize) -> ArrayD<T> {
    let shape: Vec<usize> = (0..x.ndim())
        .map(|a| match (x.shape()[a], pos.shape()[a]) {
            _ if a == axis => pos.shape()[a],
            (1, p) => p,
            (d, _) => d,
        })
        .collect();
    ArrayD::from_shape_fn(IxDyn(&shape), |ix| {
        let at = |dims: &[usize], a: usize| if dims[a] == 1 { 0 } else { ix[a] };
        let pix: Vec<usize> = (0..x.ndim()).map(|a| at(pos.shape(), a)).collect();
        let mut xix: Vec<usize> = (0..x.ndim()).map(|a| at(x.shape(), a)).collect();
        xix[axis] = pos[IxDyn(&pix)];
        x[IxDyn(&xix)]
    })
}

/// Each lane along `axis` sorted stably by `key`, as positions (argsort) into the lane.
fn ref_argsort<T: Elem>(x: &ArrayViewD<T>, axis: usize, descending: bool) -> ArrayD<i64> {
    let mut out = ArrayD::<i64>::zeros(x.raw_dim());
    for (lane, mut o) in x
        .lanes(Axis(axis))
        .into_iter()
        .zip(out.lanes_mut(Axis(axis)))
    {
        let mut order: Vec<usize> = (0..lane.len()).collect();
        order.sort_by(|&p, &q| {
            let (a, b) = (lane[p].key(), lane[q].key());
            let c = a.partial_cmp(&b).unwrap();
            if descending {
                c.reverse()
            } else {
                c
            }
        });
        for (d, p) in o.iter_mut().zip(order) {
            *d = p as i64;
        }
    }
    out
}

/// Values for an element type from small integers.
trait Elem: Copy + 'static {
    const DTYPE: DType;
    fn of(v: i64) -> Self;
    /// `self + o` (bool: or; never called for bool, which neither op adds).
    fn add(self, o: Self) -> Self;
    /// `self * o` (bool: and; never called for bool).
    fn mul(self, o: Self) -> Self;
    /// The value as a sort key (the values are small integers times a constant).
    fn key(self) -> f64;
}
macro_rules! elem {
    ($t:ty, $d:expr, $v:ident => $e:expr, $a:ident, $b:ident => $sum:expr, $prod:expr, $k:expr) => {
        impl Elem for $t {
            const DTYPE: DType = $d;
            fn of($v: i64) -> Self {
                $e
            }
            fn add(self, o: Self) -> Self {
                let ($a, $b) = (self, o);
                $sum
            }
            fn mul(self, o: Self) -> Self {
                let ($a, $b) = (self, o);
                $prod
            }
            fn key(self) -> f64 {
                let $a = self;
                $k
            }
        }
    };
}
elem!(bool, DType::Bool, v => v % 2 != 0, a, b => a | b, a & b, a as u8 as f64);
elem!(i32, DType::I32, v => v as i32, a, b => a + b, a * b, a as f64);
elem!(i64, DType::I64, v => v, a, b => a + b, a * b, a as f64);
elem!(f32, DType::F32, v => v as f32 * 0.37, a, b => a + b, a * b, a as f64);
elem!(f64, DType::F64, v => v as f64 * 0.37, a, b => a + b, a * b, a);

/// Runs `outs(x, i[, u])` on every backend with the given views and checks each output.
fn check(
    what: &str,
    params: &[(DType, Vec<usize>)],
    inputs: &[TensorRef<'_>],
    build: &dyn Fn(&[kiln::Var]) -> kiln::Var,
    want: &Result<Tensor, ()>,
) {
    for backend in backends_with_gpu_host() {
        let g = Graph::new();
        let vars: Vec<kiln::Var> = params
            .iter()
            .enumerate()
            .map(|(k, (d, s))| {
                let dims: Vec<Option<i64>> = s.iter().map(|&n| Some(n as i64)).collect();
                g.input(&format!("p{k}"), *d, dims)
            })
            .collect();
        let y = build(&vars);
        let refs: Vec<&kiln::Var> = vars.iter().collect();
        let f = function(&refs, &[&y])
            .backend(backend)
            .compile()
            .unwrap_or_else(|e| panic!("{what} on {backend:?}: {e}"));
        match (f.call(inputs), want) {
            (Ok(out), Ok(w)) => assert!(
                out[0].bit_eq(w),
                "{what} on {backend:?}: got {:?}, want {w:?}",
                out[0]
            ),
            (Err(e), Err(())) => assert!(e.to_string().contains("out of range"), "{what}: {e}"),
            (got, _) => panic!("{what} on {backend:?}: {:?}", got.map(|_| ())),
        }
    }
}

fn case<T: Elem>(rng: &mut Rng)
where
    Tensor: From<ArrayD<T>>,
    for<'a> TensorRef<'a>: From<ArrayViewD<'a, T>>,
{
    let rank = 1 + rng.below(5);
    let axis = rng.below(rank);
    // Dims 0..=3, the indexed axis at least 1 (so that indices have something to pick).
    let shape: Vec<usize> = (0..rank)
        .map(|d| {
            if d == axis {
                1 + rng.below(3)
            } else {
                rng.below(4)
            }
        })
        .collect();
    let numel: usize = shape.iter().product();
    let layout = match rng.below(3) {
        0 => Layout::RowMajor,
        1 => Layout::Transposed,
        _ => Layout::Reversed(rng.below(rank)),
    };
    let vals: Vec<T> = (0..numel).map(|_| T::of(rng.below(7) as i64 - 3)).collect();
    let owner = stored(&shape, vals, layout);
    let x = view(&owner, layout);
    // Indices: rank so that the result has rank at most 5; one in 12 out of range.
    let n = shape[axis];
    let irank = rng.below(7 - rank);
    let ishape: Vec<usize> = (0..irank).map(|_| rng.below(3)).collect();
    let m: usize = ishape.iter().product();
    let raw: Vec<i64> = (0..m)
        .map(|_| match rng.below(12) {
            0 => n as i64 + rng.below(2) as i64,
            _ => rng.below(2 * n) as i64 - n as i64,
        })
        .collect();
    let pos: Option<Vec<usize>> = raw
        .iter()
        .map(|&i| {
            let p = if i < 0 { i + n as i64 } else { i };
            (p >= 0 && (p as usize) < n).then_some(p as usize)
        })
        .collect();
    let wide = rng.below(2) == 0;
    let (idt, idx): (DType, Tensor) = if wide {
        let a = ArrayD::from_shape_vec(IxDyn(&ishape), raw.clone()).unwrap();
        (DType::I64, a.into())
    } else {
        let a = ArrayD::from_shape_vec(IxDyn(&ishape), raw.iter().map(|&i| i as i32).collect())
            .unwrap();
        (DType::I32, a.into())
    };
    let ax = axis as i64 - if rng.below(2) == 0 { rank as i64 } else { 0 };
    let what = format!(
        "{:?} {shape:?} {layout:?} axis {axis} indices {raw:?} {ishape:?}",
        T::DTYPE
    );
    let xp = (T::DTYPE, shape.clone());
    let ip = (idt, ishape.clone());
    // take
    let want = pos
        .as_ref()
        .map(|p| Tensor::from(ref_take(&x, p, axis, &ishape)))
        .ok_or(());
    check(
        &format!("take {what}"),
        &[xp.clone(), ip.clone()],
        &[x.clone().into(), idx.view()],
        &|v| v[0].take(&v[1], ax),
        &want,
    );
    // cumsum (bool counts as i64: checked on the numeric dtypes)
    if T::DTYPE != DType::Bool {
        check(
            &format!("cumsum {what}"),
            std::slice::from_ref(&xp),
            &[x.clone().into()],
            &|v| v[0].cumsum(ax),
            &Ok(Tensor::from(ref_cumsum(&x, axis))),
        );
    }
    // cumprod, sort and argsort along the axis (bool's cumprod counts as i64: numeric only)
    if T::DTYPE != DType::Bool {
        check(
            &format!("cumprod {what}"),
            std::slice::from_ref(&xp),
            &[x.clone().into()],
            &|v| v[0].cumprod(ax),
            &Ok(Tensor::from(ref_cumprod(&x, axis))),
        );
    }
    let descending = rng.below(2) == 0;
    let order = ref_argsort(&x, axis, descending);
    let sorted = ArrayD::from_shape_fn(x.raw_dim(), |ix| {
        let mut at = ix.clone();
        at[axis] = order[&ix] as usize;
        x[at]
    });
    check(
        &format!("argsort (descending {descending}) {what}"),
        std::slice::from_ref(&xp),
        &[x.clone().into()],
        &|v| {
            if descending {
                v[0].argsort_descending(ax)
            } else {
                v[0].argsort(ax)
            }
        },
        &Ok(Tensor::I64(order.clone())),
    );
    check(
        &format!("sort (descending {descending}) {what}"),
        std::slice::from_ref(&xp),
        &[x.clone().into()],
        &|v| {
            if descending {
                v[0].sort_descending(ax)
            } else {
                v[0].sort(ax)
            }
        },
        &Ok(Tensor::from(sorted)),
    );
    // take_along_axis: indices of x's rank, 0 to 2 along the axis, the other dims x's own or
    // 1 (broadcast); a position out of range in one case in 12.
    let ashape: Vec<usize> = (0..rank)
        .map(|d| match d {
            _ if d == axis => rng.below(3),
            _ if rng.below(3) == 0 => 1,
            _ => shape[d],
        })
        .collect();
    let araw: Vec<i64> = (0..ashape.iter().product::<usize>())
        .map(|_| match rng.below(12) {
            0 => n as i64,
            _ => rng.below(2 * n) as i64 - n as i64,
        })
        .collect();
    let apos: Option<Vec<usize>> = araw
        .iter()
        .map(|&i| {
            let p = if i < 0 { i + n as i64 } else { i };
            (p >= 0 && (p as usize) < n).then_some(p as usize)
        })
        .collect();
    let aidx = ArrayD::from_shape_vec(IxDyn(&ashape), araw.clone()).unwrap();
    let want = apos
        .map(|p| {
            let p = ArrayD::from_shape_vec(IxDyn(&ashape), p).unwrap();
            Tensor::from(ref_take_along(&x, &p, axis))
        })
        .ok_or(());
    check(
        &format!("take_along_axis {what} at {araw:?} {ashape:?}"),
        &[xp.clone(), (DType::I64, ashape.clone())],
        &[x.clone().into(), aidx.view().into()],
        &|v| v[0].take_along_axis(&v[1], ax),
        &want,
    );
    // scatter_set and scatter_add of updates shaped as the take, themselves a reversed view
    let mut ushape = shape[..axis].to_vec();
    ushape.extend(&ishape);
    ushape.extend(&shape[axis + 1..]);
    let uvals: Vec<T> = (0..ushape.iter().product::<usize>())
        .map(|_| T::of(rng.below(9) as i64 - 4))
        .collect();
    let ulayout = if ushape.is_empty() {
        Layout::RowMajor
    } else {
        Layout::Reversed(rng.below(ushape.len()))
    };
    let uowner = stored(&ushape, uvals, ulayout);
    let u = view(&uowner, ulayout);
    let params = [xp, ip, (T::DTYPE, ushape)];
    let want = pos
        .as_ref()
        .map(|p| Tensor::from(ref_scatter(&x, p, axis, &u, |_, u| u)))
        .ok_or(());
    check(
        &format!("scatter_set {what}"),
        &params,
        &[x.clone().into(), idx.view(), u.clone().into()],
        &|v| scatter_set(&v[0], &v[1], &v[2], ax),
        &want,
    );
    if T::DTYPE != DType::Bool {
        let want = pos
            .as_ref()
            .map(|p| Tensor::from(ref_scatter(&x, p, axis, &u, T::add)))
            .ok_or(());
        check(
            &format!("scatter_add {what}"),
            &params,
            &[x.into(), idx.view(), u.into()],
            &|v| scatter_add(&v[0], &v[1], &v[2], ax),
            &want,
        );
    }
}

#[test]
fn random_index_programs_agree_with_ndarray_on_every_backend() {
    let mut rng = Rng(0x2545f4914f6cdd1d);
    for k in 0..200 {
        match k % 5 {
            0 => case::<bool>(&mut rng),
            1 => case::<i32>(&mut rng),
            2 => case::<i64>(&mut rng),
            3 => case::<f32>(&mut rng),
            _ => case::<f64>(&mut rng),
        }
    }
}

#[test]
fn random_one_hot_programs_agree_on_every_backend() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for _ in 0..60 {
        // Indices of rank 0 to 4 (the result up to rank 5), any dtype out.
        let rank = rng.below(5);
        let shape: Vec<usize> = (0..rank).map(|_| rng.below(4)).collect();
        let depth = rng.below(5);
        let m: usize = shape.iter().product();
        let raw: Vec<i64> = (0..m).map(|_| rng.below(depth + 3) as i64 - 1).collect();
        let dtype = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64][rng.below(5)];
        let idx = ArrayD::from_shape_vec(IxDyn(&shape), raw.clone()).unwrap();
        let mut oshape = shape.clone();
        oshape.push(depth);
        let mut hot = vec![0.0; m * depth];
        for (r, &i) in raw.iter().enumerate() {
            if i >= 0 && (i as usize) < depth {
                hot[r * depth + i as usize] = 1.0;
            }
        }
        let hot = Tensor::from(ArrayD::from_shape_vec(IxDyn(&oshape), hot).unwrap());
        let want = kiln::perform::perform(&kiln::ir::Op::Cast { to: dtype }, &[&hot])
            .unwrap()
            .remove(0);
        check(
            &format!("one_hot {shape:?} depth {depth} {dtype:?} {raw:?}"),
            &[(DType::I64, shape.clone())],
            &[idx.view().into()],
            &|v| v[0].one_hot(depth as i64, dtype),
            &Ok(want),
        );
    }
}
