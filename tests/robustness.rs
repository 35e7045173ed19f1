//! Inputs that once crashed the process end in one clear error instead: results larger than
//! memory, and nesting deep enough to overflow the stack (in the text form and through the
//! graph API). What stays within the limits runs.

use kiln::{function, Backend, CompileOptions, Graph};
use ndarray::{ArrayD, IxDyn};

const BACKENDS: [Backend; 2] = [Backend::Interp, Backend::Cpu];

fn parse_err(src: &str) -> String {
    match kiln::ir::text::parse("deep.kir", src) {
        Ok(_) => String::new(),
        Err(es) => es[0].to_string(),
    }
}

#[test]
fn deeply_nested_constants_and_attributes_are_errors() {
    let deep = format!(
        "func @f() -> (f32[]) {{\n  %c = const {}1.0{} : f32[]\n  return %c\n}}\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let e = parse_err(&deep);
    assert!(e.contains("lists nest at most 32 deep"), "{e}");
    let attrs = format!(
        "func @f(%x: f32[2]) -> (f32[2]) {{\n  %y = transpose %x {{perm = {}0{}}}\n  return %y\n}}\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    assert!(parse_err(&attrs).contains("lists nest at most"));
}

/// `%c ? (%c ? ... : x) : x`, `depth` ifelse regions deep.
fn nested_ifelse(depth: usize) -> String {
    let mut s = String::from("func @f(%c: bool[], %x: f32[2]) -> (f32[2]) {\n");
    for d in 0..depth {
        s.push_str(&format!("%r{d} = ifelse %c {{\n"));
    }
    s.push_str("%e = exp %x\nyield %e\n");
    for d in (0..depth).rev() {
        s.push_str(&format!("}} else {{\nyield %x\n}}\nyield %r{d}\n"));
    }
    // The outermost region's yield is the function's return instead.
    let cut = s.rfind("yield %r0\n").unwrap();
    s.truncate(cut);
    s.push_str("return %r0\n}\n");
    s
}

#[test]
fn deeply_nested_regions_are_errors() {
    let e = parse_err(&nested_ifelse(3_000));
    assert!(e.contains("regions nest at most 64 deep"), "{e}");
}

#[test]
fn regions_at_the_limit_compile_and_run() {
    let src = nested_ifelse(kiln::ir::verify::MAX_REGION_DEPTH);
    let f = kiln::ir::text::parse("deep.kir", &src).unwrap().remove(0);
    for backend in BACKENDS {
        let opts = CompileOptions {
            backend: Some(backend),
            ..Default::default()
        };
        let func = kiln::compile_func(f.clone(), &opts).unwrap();
        let c = ArrayD::from_elem(IxDyn(&[]), true);
        let x = ArrayD::from_elem(IxDyn(&[2]), 0.0f32);
        let out = func
            .call(&[
                kiln::TensorRef::from(c.view()),
                kiln::TensorRef::from(x.view()),
            ])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![1.0, 1.0], "{backend}");
    }
}

#[test]
fn deeply_nested_branches_built_through_the_api_are_errors() {
    fn nest(c: &kiln::Var, x: &kiln::Var, depth: usize) -> kiln::Var {
        if depth == 0 {
            return x.exp();
        }
        kiln::ifelse(c, || vec![nest(c, x, depth - 1)], || vec![x.clone()]).remove(0)
    }
    let g = Graph::new();
    let c = g.input("c", kiln::bool, Vec::<Option<i64>>::new());
    let x = g.input("x", kiln::f32, [Some(2)]);
    // Built on a thread with room for the user's own recursion.
    let y = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn({
            let (c, x) = (c.clone(), x.clone());
            move || nest(&c, &x, 1_000)
        })
        .unwrap()
        .join()
        .unwrap();
    let err = function(&[&c, &x], &[&y])
        .compile()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("nest deeper than 64"), "{err}");
}

#[test]
fn long_chains_compile_run_and_differentiate() {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let mut y = x.clone();
    for i in 0..10_000 {
        y = if i % 2 == 0 { &y * 1.0001 } else { &y - 0.0001 };
    }
    let loss = y.sum(None, false);
    let gx = kiln::grad(&loss, &[&x]).unwrap().remove(0);
    for backend in BACKENDS {
        let f = function(&[&x], &[&loss, &gx])
            .backend(backend)
            .compile()
            .unwrap();
        let out = f
            .call(&[ArrayD::from_elem(IxDyn(&[3]), 1.0f64).view()])
            .unwrap();
        let want = 1.0001f64.powi(5_000);
        assert!(
            (out[1].to_f64_vec()[0] - want).abs() < 1e-6 * want,
            "{backend}"
        );
    }
}

#[test]
fn results_larger_than_memory_are_errors_naming_the_value() {
    for backend in BACKENDS {
        let g = Graph::new();
        let z = g.zeros(kiln::f32, &[100_000_000_000]).named("z");
        let f = function(&[], &[&z]).backend(backend).compile().unwrap();
        let none: [kiln::TensorRef; 0] = [];
        let err = f.call(&none).unwrap_err().to_string();
        assert!(
            err.contains("`z`") && err.contains("400.0 GB"),
            "{backend}: {err}"
        );

        // A broadcast whose extents come at call time: 100000 x 1000000 f32.
        let g = Graph::new();
        let a = g.input("a", kiln::f32, [None, Some(1)]);
        let b = g.input("b", kiln::f32, [Some(1), None]);
        let s = (&a + &b).named("s");
        let f = function(&[&a, &b], &[&s])
            .backend(backend)
            .compile()
            .unwrap();
        let (av, bv) = (
            ArrayD::<f32>::zeros(IxDyn(&[100_000, 1])),
            ArrayD::<f32>::zeros(IxDyn(&[1, 1_000_000])),
        );
        let err = f.call(&[av.view(), bv.view()]).unwrap_err().to_string();
        assert!(
            err.contains("`s`") && err.contains("GB"),
            "{backend}: {err}"
        );
        // The function still runs on what fits.
        let (av, bv) = (
            ArrayD::<f32>::zeros(IxDyn(&[3, 1])),
            ArrayD::<f32>::zeros(IxDyn(&[1, 4])),
        );
        assert_eq!(f.call(&[av.view(), bv.view()]).unwrap()[0].shape(), &[3, 4]);
    }
}
