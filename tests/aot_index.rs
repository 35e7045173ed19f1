//! Indexing by tensors and running sums ahead of time (`take`, `take_along_axis`,
//! `scatter_add`, `scatter_set`, `one_hot`, `cumsum`, `cumprod` and `cumprod`'s gradient) on
//! random ranks, axes, dtypes (all seven where the op takes them), index dtypes, negative and
//! repeated indices, broadcast dims and transposed inputs: the object gives the interpreter's
//! bits. An index out of range makes the entry point return the failing step's code, which the
//! header and the artifact explain.

#[path = "support/aot_cases.rs"]
mod aot_cases;
#[path = "support/aot_lib.rs"]
mod aot_lib;
mod common;

use aot_cases::{as_dtype, case, check_all, stored_transposed, swap_last, Case};
use common::Rng;
use kiln::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// A random shape of `rank` dims of 1 to 4 (0 now and then, where `empty_ok`).
fn shape(rng: &mut Rng, rank: usize, empty_ok: bool) -> Vec<usize> {
    (0..rank)
        .map(|_| match rng.below(12) {
            0 if empty_ok => 0,
            _ => 1 + rng.below(4),
        })
        .collect()
}

/// Values of `dtype`: for floats a full mantissa (sums that round), for the rest small
/// integers (bools: 0 and 1).
fn values(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| match dtype {
            DType::Bool => rng.below(2) as f64,
            d if d.is_float() => (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0,
            _ => rng.below(2001) as f64 - 1000.0,
        })
        .collect();
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

/// Indices of `shape` in `lo..hi`, i32 or i64.
fn indices(rng: &mut Rng, shape: &[usize], lo: i64, hi: i64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (lo + rng.below((hi - lo).max(1) as usize) as i64) as f64)
        .collect();
    let dtype = if rng.below(2) == 0 {
        DType::I32
    } else {
        DType::I64
    };
    as_dtype(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap(), dtype)
}

/// `x` as stored (transposed, so the op reads it through strides, when `transposed`).
fn stored(x: &Tensor, transposed: bool) -> Tensor {
    if transposed {
        stored_transposed(x)
    } else {
        x.clone()
    }
}

fn read(v: &kiln::Var, transposed: bool) -> kiln::Var {
    if transposed {
        swap_last(v)
    } else {
        v.clone()
    }
}

#[test]
fn random_gathers_and_scatters_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_1de0_0000_0001);
    let mut cases: Vec<Case> = Vec::new();
    for k in 0..60 {
        // Ranks 1 to 5 (the result's rank stays at most 5 with the indices' dims).
        let rank = 1 + rng.below(5);
        let axis = rng.below(rank);
        let mut xs = shape(&mut rng, rank, true);
        xs[axis] = 1 + rng.below(4);
        let n = xs[axis] as i64;
        let transposed = rank >= 2 && k % 3 == 1;
        let dtype = DType::ALL[k % 7];
        let x = values(&mut rng, &xs, dtype);
        let x_in = stored(&x, transposed);
        let ax = axis as i64;
        match k % 3 {
            // take, indices of rank 0 to 2, negative ones included
            0 => {
                let irank = rng.below((6 - rank).min(3));
                let is = shape(&mut rng, irank, true);
                let idx = indices(&mut rng, &is, -n, n);
                let what = format!("take {k}: {dtype}{xs:?} axis {axis} at {idx:?}");
                cases.push(case(what, format!("take{k}"), vec![x_in, idx], |v| {
                    vec![read(&v[0], transposed).take(&v[1], ax)]
                }));
            }
            // take_along_axis: the other dims broadcast both ways
            1 => {
                let mut is: Vec<usize> = xs.iter().map(|&d| [d, 1][rng.below(2)]).collect();
                is[axis] = rng.below(4);
                let mut xs2 = xs.clone();
                for d in 0..rank {
                    if d != axis && rng.below(4) == 0 {
                        // x of 1 there, stretched to the indices' dim
                        xs2[d] = 1;
                        is[d] = 1 + rng.below(3);
                    }
                }
                let x = values(&mut rng, &xs2, dtype);
                let x_in = stored(&x, transposed);
                let idx = indices(&mut rng, &is, -n, n);
                let what = format!("take_along_axis {k}: {dtype}{xs2:?} axis {axis} at {idx:?}");
                cases.push(case(what, format!("along{k}"), vec![x_in, idx], |v| {
                    vec![read(&v[0], transposed).take_along_axis(&v[1], ax)]
                }));
            }
            // scatter_add (numbers) or scatter_set (any dtype), positions repeating
            _ => {
                let add = dtype.is_float() && !dtype.is_half() || dtype.is_int();
                let irank = rng.below((6 - rank).min(3));
                let is: Vec<usize> = (0..irank).map(|_| 1 + rng.below(5)).collect();
                let idx = indices(&mut rng, &is, -n, n);
                let mut us = xs[..axis].to_vec();
                us.extend(&is);
                us.extend(&xs[axis + 1..]);
                let u = values(&mut rng, &us, dtype);
                let what = format!(
                    "scatter_{} {k}: {dtype}{xs:?} axis {axis} at {idx:?}",
                    if add { "add" } else { "set" }
                );
                cases.push(case(what, format!("scatter{k}"), vec![x_in, idx, u], |v| {
                    let x = read(&v[0], transposed);
                    vec![if add {
                        kiln::scatter_add(&x, &v[1], &v[2], ax)
                    } else {
                        kiln::scatter_set(&x, &v[1], &v[2], ax)
                    }]
                }));
            }
        }
    }
    check_all(&cases, "gathers");
}

#[test]
fn random_one_hots_and_running_sums_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_1de0_0000_0002);
    let mut cases: Vec<Case> = Vec::new();
    for k in 0..21 {
        // one_hot of indices inside and outside 0..depth, into every dtype
        let irank = rng.below(5);
        let is = shape(&mut rng, irank, true);
        let depth = rng.below(5);
        let idx = indices(&mut rng, &is, -2, depth as i64 + 2);
        let dtype = DType::ALL[k % 7];
        let what = format!("one_hot {k}: depth {depth} {dtype} of {idx:?}");
        cases.push(case(what, format!("onehot{k}"), vec![idx], |v| {
            vec![v[0].one_hot(depth as i64, dtype)]
        }));
    }
    let numbers = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];
    for k in 0..30 {
        let rank = 1 + rng.below(5);
        let axis = rng.below(rank);
        let xs = shape(&mut rng, rank, true);
        let transposed = rank >= 2 && k % 4 == 1;
        let dtype = numbers[k % 5];
        let sum = k % 2 == 0;
        // Products stay finite and nonzero: factors near 1 (and some zeros, for the gradient).
        let x = match (sum, dtype.is_float()) {
            (false, true) => {
                let n: usize = xs.iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|_| match rng.below(8) {
                        0 => 0.0,
                        _ => 0.75 + (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 0.5,
                    })
                    .collect();
                as_dtype(ArrayD::from_shape_vec(IxDyn(&xs), v).unwrap(), dtype)
            }
            _ => values(&mut rng, &xs, dtype),
        };
        let x_in = stored(&x, transposed);
        let float = dtype.is_float();
        let mut inputs = vec![x_in];
        if float {
            inputs.push(values(&mut rng, &xs, dtype));
        }
        let what = format!(
            "{} {k}: {dtype}{xs:?} axis {axis}",
            if sum { "cumsum" } else { "cumprod" }
        );
        let ax = axis as i64;
        cases.push(case(what, format!("running{k}"), inputs, |v| {
            let x = read(&v[0], transposed);
            let y = if sum { x.cumsum(ax) } else { x.cumprod(ax) };
            if !float {
                return vec![y];
            }
            // The gradient of both: the reversed cumsum, and `cumprod_grad`.
            let loss = (&y * &v[1]).sum(None, false);
            let dx = kiln::grad(&loss, &[&x]).unwrap().remove(0);
            vec![y, dx]
        }));
    }
    check_all(&cases, "running");
}

#[test]
fn random_sorts_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_1de0_0000_0003);
    let mut cases: Vec<Case> = Vec::new();
    let special = common::SORT_SPECIALS;
    for k in 0..42 {
        let rank = 1 + rng.below(5);
        let axis = rng.below(rank);
        let mut xs = shape(&mut rng, rank, true);
        // Long lanes now and then: merges of several widths, odd lengths.
        if rng.below(3) == 0 {
            xs[axis] = 5 + rng.below(40);
        }
        let dtype = DType::ALL[k % 7];
        let n: usize = xs.iter().product();
        // Few distinct values (ties), and the special floats.
        let v: Vec<f64> = (0..n)
            .map(|_| match rng.below(4) {
                0 if dtype.is_float() => special[rng.below(special.len())],
                _ => rng.below(9) as f64 - 4.0 + if dtype.is_float() { 0.5 } else { 0.0 },
            })
            .collect();
        let x = as_dtype(ArrayD::from_shape_vec(IxDyn(&xs), v).unwrap(), dtype);
        let transposed = rank >= 2 && k % 3 == 2;
        let x_in = stored(&x, transposed);
        let descending = k % 2 == 1;
        let ax = axis as i64;
        let what = format!("sort {k}: {dtype}{xs:?} axis {axis} descending {descending}");
        cases.push(case(what, format!("sort{k}"), vec![x_in], |v| {
            let x = read(&v[0], transposed);
            if descending {
                vec![x.sort_descending(ax), x.argsort_descending(ax)]
            } else {
                vec![x.sort(ax), x.argsort(ax)]
            }
        }));
    }
    check_all(&cases, "sorts");
}

#[test]
fn an_index_out_of_range_returns_the_code_of_the_step_that_found_it() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let table = as_dtype(
        ArrayD::from_shape_vec(IxDyn(&[3, 2]), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
        DType::F32,
    );
    let ids = |v: Vec<i64>| Tensor::from(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap());
    // Two steps that can fail: the take (code 1) and the scatter (code 2).
    let c = case(
        "take then scatter".into(),
        "lookup".into(),
        vec![table.clone(), ids(vec![2, -3]), ids(vec![0, 1])],
        |v| {
            let rows = v[0].take(&v[1], 0);
            vec![kiln::scatter_add(&v[0], &v[2], &rows, 0)]
        },
    );
    assert_eq!(c.art.errors.len(), 2, "{:?}", c.art.errors);
    assert!(c.art.errors[0].contains("take") && c.art.errors[0].contains("size 3"));
    assert!(c.art.errors[1].contains("scatter_add"));
    // The header lists the codes and says what each means.
    assert!(c.art.header.contains("int32_t lookup("), "{}", c.art.header);
    assert!(c
        .art
        .header
        .contains("static inline const char *lookup_error(int32_t code)"));
    assert!(c
        .art
        .header
        .contains(&format!("case 1: return \"{}\";", c.art.errors[0])));
    let dir = std::env::temp_dir().join(format!("kiln-aot-index-{}-errors", std::process::id()));
    let lib = aot_lib::link(&[&c.art], &dir).unwrap();
    // In range (-3 is row 0): the interpreter's result.
    let got = lib.call(&c.art, &c.inputs).unwrap();
    assert!(common::same_bits(&got[0], &c.want[0]));
    for (take, scatter, code) in [
        (vec![3, 0], vec![0, 1], 1),
        (vec![0, -4], vec![0, 1], 1),
        (vec![0, 1], vec![0, 3], 2),
        (vec![0, 1], vec![-4, 0], 2),
    ] {
        let err = lib
            .call(
                &c.art,
                &[table.clone(), ids(take.clone()), ids(scatter.clone())],
            )
            .expect_err("an index out of range");
        assert!(
            err.contains(&format!("returned {code}: {}", c.art.errors[code - 1])),
            "take {take:?} scatter {scatter:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn indices_are_checked_where_nothing_is_gathered_or_scattered() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    // Rows of no element: the results are empty, but an index out of range is still an error,
    // as in the interpreter.
    let table = Tensor::zeros(DType::F32, &[3, 0]);
    let ids = |v: Vec<i32>| Tensor::from(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap());
    let cases = [
        case(
            "take".into(),
            "empty_take".into(),
            vec![table.clone(), ids(vec![0, 2])],
            |v| vec![v[0].take(&v[1], 0)],
        ),
        case(
            "scatter".into(),
            "empty_scatter".into(),
            vec![
                table.clone(),
                ids(vec![1]),
                Tensor::zeros(DType::F32, &[1, 0]),
            ],
            |v| vec![kiln::scatter_add(&v[0], &v[1], &v[2], 0)],
        ),
    ];
    let dir = std::env::temp_dir().join(format!("kiln-aot-index-{}-empty", std::process::id()));
    let arts: Vec<&kiln::aot::AotArtifact> = cases.iter().map(|c| &c.art).collect();
    let lib = aot_lib::link(&arts, &dir).unwrap();
    for c in &cases {
        let got = lib.call(&c.art, &c.inputs).unwrap();
        assert!(common::same_bits(&got[0], &c.want[0]), "{}", c.what);
        let mut bad = c.inputs.clone();
        bad[1] = ids(vec![3; c.inputs[1].len()]);
        let err = lib.call(&c.art, &bad).expect_err("an index out of range");
        assert!(
            err.contains("returned 1") && err.contains("out of range"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gather of whole rows (an embedding lookup) copies each row 64 bytes at a time, then 16,
/// then element by element: rows of every width around those steps, in every element size,
/// give the interpreter's bits (the random cases above have short rows).
#[test]
fn gathered_rows_of_every_width_have_the_interpreters_bits() {
    if !aot_lib::have_cc() {
        eprintln!("skipped: no `cc` to link the objects with");
        return;
    }
    let mut rng = Rng(0x5eed_1de0_0000_0003);
    let mut cases: Vec<Case> = Vec::new();
    let dtypes = [DType::Bool, DType::F16, DType::F32, DType::F64];
    for (k, bytes) in [1, 15, 16, 17, 48, 63, 64, 65, 80, 127, 128, 200, 520]
        .into_iter()
        .enumerate()
    {
        for dtype in dtypes {
            if bytes % dtype.size() != 0 {
                continue;
            }
            let width = bytes / dtype.size();
            let x = values(&mut rng, &[7, width], dtype);
            let idx = indices(&mut rng, &[3, 4], -7, 7);
            let what = format!("rows of {bytes} bytes: {dtype}[7, {width}] at {idx:?}");
            let symbol = format!("rows{k}_{}", dtype.size());
            cases.push(case(what, symbol, vec![x, idx], |v| {
                vec![v[0].take(&v[1], 0)]
            }));
        }
    }
    check_all(&cases, "gathered_rows");
}
