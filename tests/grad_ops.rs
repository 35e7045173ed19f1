//! Every differentiable op's gradient rule checked against finite differences, plus the
//! structural rules: broadcasting, reuse, disconnected inputs, non-differentiable paths,
//! second derivatives and `grad_func`.

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

use kiln::grad::{grad_with, Disconnected, GradOptions};
use kiln::{function, grad, Graph, Var};
use kiln::{verify_grad, VerifyOptions};
use ndarray::{ArrayD, IxDyn};

type UnaryBuild = fn(&Var) -> Var;
type BinaryBuild = fn(&Var, &Var) -> Var;

/// Deterministic points in [lo, hi).
fn pts(seed: u64, shape: &[usize], lo: f64, hi: f64) -> ArrayD<f64> {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| lo + (hi - lo) * kiln::random::uniform_f64(seed, i))
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

fn check(build: impl Fn(&Graph, &[Var]) -> Var, points: &[ArrayD<f64>]) {
    verify_grad(build, points, VerifyOptions::default()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn unary_rules() {
    let p = [pts(1, &[2, 3], 0.2, 1.5)];
    let unary: &[(&str, UnaryBuild)] = &[
        ("neg", |x| -x),
        ("abs", |x| (x - 0.7).abs()),
        ("exp", |x| x.exp()),
        ("log", |x| x.log()),
        ("log1p", |x| x.log1p()),
        ("expm1", |x| x.expm1()),
        ("sqrt", |x| x.sqrt()),
        ("rsqrt", |x| x.rsqrt()),
        ("sin", |x| x.sin()),
        ("cos", |x| x.cos()),
        ("tan", |x| x.tan()),
        ("tanh", |x| x.tanh()),
        ("sigmoid", |x| x.sigmoid()),
        ("erf", |x| x.erf()),
        ("square", |x| x.square()),
        ("reciprocal", |x| x.reciprocal()),
        ("relu", |x| (x - 0.7).relu()),
        ("floor is flat", |x| x.floor() + x),
    ];
    for (name, f) in unary {
        verify_grad(|_, v| f(&v[0]), &p, VerifyOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn binary_rules_with_broadcasting() {
    let a = pts(2, &[2, 3], 0.5, 2.0);
    let b = pts(3, &[3], 0.5, 2.0);
    let c = pts(4, &[2, 1], 0.5, 2.0);
    let binary: &[(&str, BinaryBuild)] = &[
        ("add", |x, y| x + y),
        ("sub", |x, y| x - y),
        ("mul", |x, y| x * y),
        ("div", |x, y| x / y),
        ("pow", |x, y| x.pow(y)),
        ("maximum", |x, y| x.maximum(y)),
        ("minimum", |x, y| x.minimum(y)),
        ("mod", |x, y| x.modulo(y)),
    ];
    for (name, f) in binary {
        for pair in [
            [a.clone(), b.clone()],
            [c.clone(), b.clone()],
            [b.clone(), a.clone()],
        ] {
            verify_grad(|_, v| f(&v[0], &v[1]), &pair, VerifyOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn select_cast_and_values_used_several_times() {
    let p = [pts(5, &[4], -1.0, 1.0), pts(6, &[4], -1.0, 1.0)];
    check(
        |_, v| kiln::select(&v[0].gt(0.0), &v[0] * 3.0, &v[1] * &v[1]),
        &p,
    );
    check(
        |_, v| (&v[0] * &v[0] * &v[0] + v[0].exp() * &v[0]).sum(None, false),
        &p[..1],
    );
    // Through f32 the function is quantized: finite differences need a coarser step.
    let coarse = VerifyOptions {
        eps: 1e-3,
        abs_tol: 1e-3,
        rel_tol: 1e-3,
        ..Default::default()
    };
    verify_grad(
        |_, v| (v[0].cast(kiln::f32).cast(kiln::f64) * 2.0).sum(None, false),
        &p[..1],
        coarse,
    )
    .unwrap();
}

#[test]
fn reductions() {
    let p = [pts(7, &[3, 4], 0.5, 2.0)];
    for keep in [false, true] {
        check(|_, v| v[0].sum(Some(&[1]), keep).square(), &p);
        check(|_, v| v[0].mean(Some(&[0]), keep).square(), &p);
        check(|_, v| v[0].prod(Some(&[1]), keep), &p);
        check(|_, v| v[0].max(Some(&[1]), keep).square(), &p);
        check(|_, v| v[0].min(None, keep), &p);
    }
    check(|_, v| v[0].mean(None, false), &p);
    // Ties share the gradient equally.
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let gx = grad(&x.max(None, false), &[&x]).unwrap();
    let f = function(&[&x], &[&gx[0]]).compile().unwrap();
    let out = f
        .call(&[ndarray::array![2.0f64, 5.0, 5.0].into_dyn().view()])
        .unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![0.0, 0.5, 0.5]);
}

#[test]
fn shape_ops() {
    let p = [pts(8, &[2, 3, 4], -1.0, 1.0)];
    let w = pts(9, &[64], -1.0, 1.0);
    let weighted = move |g: &Graph, v: Var| {
        // A non-uniform weighting so that every element's gradient differs.
        let n = v.ty().known_shape().unwrap().iter().product::<usize>();
        let wv = g.constant(
            w.slice(ndarray::s![..n])
                .to_owned()
                .into_shape_with_order(IxDyn(&v.ty().known_shape().unwrap()))
                .unwrap(),
        );
        (v * wv).sum(None, false)
    };
    let wf = |f: fn(&Var) -> Var| {
        let weighted = weighted.clone();
        move |g: &Graph, v: &[Var]| weighted(g, f(&v[0]))
    };
    check(wf(|x| x.transpose(&[2, 0, 1])), &p);
    check(wf(|x| x.reshape(&[4, -1])), &p);
    check(wf(|x| x.sum(Some(&[0]), true).broadcast_to(&[3, 3, 4])), &p);
    check(wf(|x| x.expand_dims(&[1]).squeeze(Some(&[1]))), &p);
    check(wf(|x| x.slice(&[(None, None, 1), (Some(1), None, 1)])), &p);
    check(
        wf(|x| x.slice(&[(None, None, -1), (None, None, 2), (Some(3), Some(0), -2)])),
        &p,
    );
    check(wf(|x| x.slice(&[(Some(5), None, 1)])), &p);
    check(
        wf(|x| kiln::concat(&[x, &x.slice(&[(Some(1), None, 1)]).exp()], 0)),
        &p,
    );
}

#[test]
fn matmul_in_every_form() {
    let forms: &[(&[usize], &[usize])] = &[
        (&[2, 3], &[3, 4]),
        (&[3], &[3, 2]),
        (&[2, 3], &[3]),
        (&[3], &[3]),
        (&[2, 2, 3], &[3, 2]),
        (&[2, 1, 2, 3], &[3, 4]),
        (&[2, 3, 3], &[3]),
        (&[3], &[2, 3, 2]),
        (&[2, 2, 3], &[2, 3, 2]),
    ];
    for (k, (sa, sb)) in forms.iter().enumerate() {
        let p = [
            pts(10 + k as u64, sa, -1.0, 1.0),
            pts(20 + k as u64, sb, -1.0, 1.0),
        ];
        verify_grad(
            |_, v| v[0].matmul(&v[1]).tanh(),
            &p,
            VerifyOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{sa:?} @ {sb:?}: {e}"));
    }
}

#[test]
fn one_matrix_for_a_batch_gets_its_gradient_from_one_product() {
    // A dense layer over [batch, tokens, features]: the weight's gradient is one product of
    // every row (k = 16 * 64), not a product per batch entry added up afterwards.
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(16), Some(64), Some(128)]);
    let w = g.shared("w", ArrayD::<f32>::zeros(IxDyn(&[128, 32])));
    let loss = x.matmul(&w).tanh().sum(None, false);
    let gw = grad(&loss, &[&w]).unwrap().remove(0);
    let owner = gw.owner().expect("the gradient is computed");
    assert_eq!(owner.op(), kiln::ir::Op::MatMul, "{}", owner.op().name());
    let ranks: Vec<usize> = owner.inputs().iter().map(|v| v.rank()).collect();
    assert_eq!(ranks, [2, 2]);
}

#[test]
fn custom_op_gradients() {
    let p = [pts(11, &[3], -1.0, 1.0)];
    check(
        |g, v| g.apply_custom(ops::Scale::new(-2.5), &[&v[0].sin()])[0].exp(),
        &p,
    );
    // An op without a gradient is an error naming it and where it was built.
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let line = line!() + 1;
    let t = g.apply_custom(ops::Tear { dims: vec![0] }, &[&x]);
    let e = grad(&t[0].sum(None, false), &[&x]).unwrap_err().to_string();
    assert!(
        e.contains("tear") && e.contains(&format!("grad_ops.rs:{line}")),
        "{e}"
    );
}

#[test]
fn disconnected_and_non_differentiable_inputs() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(2)]);
    let y = g.input("y", kiln::f64, [Some(2)]);
    let cost = x.exp().sum(None, false);
    let e = grad(&cost, &[&x, &y]).unwrap_err().to_string();
    assert!(e.contains("`y`"), "{e}");
    let gs = grad_with(
        &cost,
        &[&x, &y],
        GradOptions {
            disconnected: Disconnected::Zero,
            ..Default::default()
        },
    )
    .unwrap();
    let f = function(&[&x, &y], &[&gs[1]]).compile().unwrap();
    let v = ndarray::array![1.0f64, 2.0].into_dyn();
    assert_eq!(
        f.call(&[v.view(), v.view()]).unwrap()[0].to_f64_vec(),
        vec![0.0, 0.0]
    );
    // Through a comparison: a clear error naming the op and its line.
    let line = line!() + 1;
    let through = x.gt(0.5).cast(kiln::f64).sum(None, false);
    let e = grad(&through, &[&x]).unwrap_err().to_string();
    assert!(
        e.contains("gt") && e.contains(&format!("grad_ops.rs:{line}")),
        "{e}"
    );
    // Non-scalar costs and integer wrt are errors too.
    assert!(grad(&x.exp(), &[&x]).is_err());
    let i = g.input("i", kiln::i32, [Some(2)]);
    assert!(grad(&cost, &[&i]).is_err());
}

#[test]
fn hessian_vector_product_matches_finite_differences() {
    // f(x) = sum(tanh(W x) * x) ; Hv = grad(grad(f) . v)
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let v = g.input("v", kiln::f64, [Some(3)]);
    let w = g.constant(pts(12, &[3, 3], -1.0, 1.0));
    let f = (w.matmul(&x).tanh() * &x).sum(None, false);
    let gx = grad(&f, &[&x]).unwrap().remove(0);
    let hv = grad(&(&gx * &v).sum(None, false), &[&x]).unwrap().remove(0);
    let fgrad = function(&[&x], &[&gx]).compile().unwrap();
    let fhv = function(&[&x, &v], &[&hv]).compile().unwrap();
    let x0 = pts(13, &[3], -1.0, 1.0);
    let v0 = pts(14, &[3], -1.0, 1.0);
    let got = fhv.call(&[x0.view(), v0.view()]).unwrap()[0].to_f64_vec();
    let eps = 1e-5;
    let at = |s: f64| fgrad.call(&[(&x0 + &(&v0 * s)).view()]).unwrap()[0].to_f64_vec();
    let (up, down) = (at(eps), at(-eps));
    for i in 0..3 {
        let num = (up[i] - down[i]) / (2.0 * eps);
        assert!((got[i] - num).abs() < 1e-6, "Hv[{i}] = {} vs {num}", got[i]);
    }
}

#[test]
fn grad_func_returns_the_cost_and_its_gradients() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(2)]);
    let y = g.input("y", kiln::f64, [Some(2)]);
    let c = (&x * &y).sum(None, false);
    let ssa = kiln::graph::to_ssa("f", &[x.clone(), y.clone()], &[c], &[])
        .unwrap()
        .func;
    let gf = kiln::grad::grad_func(&ssa, 0, &["y"]).unwrap();
    assert_eq!(gf.outputs.len(), 2);
    let out = kiln::runtime::interp::run_func(
        &gf,
        vec![
            kiln::Tensor::F64(ndarray::array![1.0, 2.0].into_dyn()),
            kiln::Tensor::F64(ndarray::array![3.0, 4.0].into_dyn()),
        ],
    )
    .unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![11.0]);
    assert_eq!(out[1].to_f64_vec(), vec![1.0, 2.0]);
    assert!(kiln::grad::grad_func(&ssa, 0, &["z"]).is_err());
    assert!(kiln::grad::grad_func(&ssa, 3, &["x"]).is_err());
}

#[test]
fn fused_reductions_differentiate_through_their_prologue() {
    use kiln::ir::scalar::parse_program;
    use kiln::ir::{Op, ReduceOp};
    let program = std::sync::Arc::new(parse_program("%0 = input 0 : f64; %1 = input 1 : f64; %2 = sub %0, %1 : f64; %3 = exp %2 : f64; return %3").unwrap());
    for r in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
        let op = Op::FusedReduce {
            op: r,
            axes: Some(vec![1]),
            keepdims: true,
            program: program.clone(),
        };
        let p = [pts(30, &[2, 3], -1.0, 1.0), pts(31, &[2, 1], -1.0, 1.0)];
        verify_grad(
            |g, v| {
                g.try_apply(op.clone(), &[&v[0], &v[1]])
                    .unwrap()
                    .remove(0)
                    .log()
            },
            &p,
            VerifyOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{r:?}: {e}"));
    }
}

/// The `grad` dump of `kiln::grad`: the cost and its gradients as one function in the text
/// form, which parses back and computes what the compiled gradients compute.
#[test]
fn grad_dumps_the_cost_and_its_gradients_as_a_function() {
    let dir = std::env::temp_dir().join(format!("kiln-grad-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let w = g.shared("w", ndarray::array![0.5f64, -1.0, 2.0].into_dyn());
    let cost = (&x * &w).tanh().sum(None, false);
    let opts = GradOptions {
        dump: Some(kiln::dump::DumpOptions {
            stages: vec!["grad".into()],
            dir: Some(dir.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let gs = grad_with(&cost, &[&x, &w], opts).unwrap();
    let text = std::fs::read_to_string(dir.join("grad.01.grad.txt")).expect("a grad dump");
    let dumped = kiln::ir::text::parse("grad.01.grad.txt", &text)
        .unwrap_or_else(|e| panic!("{e:?}\n{text}"))
        .remove(0);
    assert_eq!(
        (dumped.params.len(), dumped.outputs.len()),
        (2, 3),
        "{text}"
    );
    let xv = ndarray::array![0.1f64, 0.7, -0.3].into_dyn();
    let wv = ndarray::array![0.5f64, -1.0, 2.0].into_dyn();
    let ran = kiln::runtime::interp::run_func(&dumped, vec![xv.clone().into(), wv.into()]).unwrap();
    let f = function(&[&x], &[&cost, &gs[0], &gs[1]]).compile().unwrap();
    let want = f.call(&[xv.view()]).unwrap();
    for (a, b) in ran.iter().zip(&want) {
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        assert!(
            a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12),
            "{a:?} {b:?}"
        );
    }
    // Without the stage asked for, nothing more is written.
    let quiet = GradOptions {
        dump: Some(kiln::dump::DumpOptions::default()),
        ..Default::default()
    };
    grad_with(&cost, &[&x], quiet).unwrap();
    assert!(!dir.join("grad-2.01.grad.txt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `verify_grad` takes points in any layout: a transposed point (column-major in memory) is
/// nudged and compared element for element in logical order (it once nudged memory order and
/// compared logical order, which fails any function that is not symmetric in its elements).
#[test]
fn verify_grad_takes_points_in_any_layout() {
    let weights = ArrayD::from_shape_fn(IxDyn(&[3, 4]), |i| (i[0] * 4 + i[1]) as f64 - 5.0);
    let point = pts(9, &[4, 3], -1.0, 1.0).reversed_axes();
    assert!(!point.is_standard_layout());
    let w = weights.clone();
    let build = move |g: &Graph, v: &[Var]| {
        let c = g.constant(kiln::Tensor::F64(w.clone()));
        (&(&v[0] * &c) * &v[0]).sum(None, false)
    };
    verify_grad(&build, &[point], VerifyOptions::default()).unwrap_or_else(|e| panic!("{e}"));
}
