//! The text form round-trips: for random functions, `print(parse(print(f)))` equals `print(f)`
//! and the reparsed function computes the same values. The parser and verifier never panic,
//! whatever bytes they are given.

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

use kiln::custom::{register_custom_op, CustomOpRef};
use kiln::ir::text::{parse, print_func};
use kiln::runtime::interp::run_func;
use kiln::{Graph, Tensor, Var};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

/// A random function of two f64 inputs of shape [2, 3], built through the graph API from a
/// list of op choices.
fn random_func(choices: &[(u8, u8, u8)]) -> kiln::ir::Func {
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(2), Some(3)]);
    let y = g.input("y", kiln::f64, [Some(2), Some(3)]);
    let mut pool: Vec<Var> = vec![x.clone(), y.clone()];
    for &(op, a, b) in choices {
        let (p, q) = (
            pool[a as usize % pool.len()].clone(),
            pool[b as usize % pool.len()].clone(),
        );
        let v = match op % 14 {
            0 => &p + &q,
            1 => &p * &q,
            2 => p.tanh(),
            3 => p.maximum(&q),
            4 => kiln::select(&p.gt(&q), &p, &q),
            5 => p.sum(Some(&[1]), true) + &q,
            6 => p.max(Some(&[0]), true) - &q,
            7 => p.transpose(&[1, 0]).t(),
            8 => p.reshape(&[3, 2]).reshape(&[2, 3]),
            9 => &p * 0.25 + 1.5,
            10 => p.slice(&[(None, None, -1)]),
            11 => kiln::concat(&[&p, &q], 0).slice(&[(Some(1), Some(3), 1)]),
            12 => p.matmul(&q.t()).matmul(&q),
            _ => p.abs().sqrt().cast(kiln::f32).cast(kiln::f64),
        };
        pool.push(v.check().expect("random ops are well typed").clone());
    }
    let out = pool.last().unwrap().clone();
    kiln::graph::to_ssa("rand", &[x, y], &[out], &[])
        .unwrap()
        .func
}

fn inputs() -> Vec<Tensor> {
    let a = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| (i[0] * 3 + i[1]) as f64 * 0.37 - 1.0);
    let b = ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| 0.5 - (i[1] * 2 + i[0]) as f64 * 0.21);
    vec![Tensor::F64(a), Tensor::F64(b)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_functions_round_trip(choices in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..12)) {
        let f = random_func(&choices);
        let text = print_func(&f);
        let back = parse("random", &text).map_err(|e| TestCaseError::fail(format!("{}\n{text}", e[0])))?;
        prop_assert_eq!(print_func(&back[0]), text.clone());
        let a = run_func(&f, inputs()).unwrap();
        let b = run_func(&back[0], inputs()).unwrap();
        prop_assert!(a[0].bit_eq(&b[0]), "{text}");
    }

    #[test]
    fn fusion_preserves_values_and_round_trips(choices in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..12)) {
        let f = random_func(&choices);
        let options = kiln::CompileOptions { dump: Default::default(), ..Default::default() };
        let fused = kiln::compile::optimize(f.clone(), &options);
        prop_assert!(kiln::ir::verify::verify(&fused).is_ok(), "{}", print_func(&fused));
        prop_assert!(fused.inst_count() <= f.inst_count());
        let a = run_func(&f, inputs()).unwrap();
        let b = run_func(&fused, inputs()).unwrap();
        prop_assert!(a[0].bit_eq(&b[0]), "{}\n{}", print_func(&f), print_func(&fused));
        let text = print_func(&fused);
        let back = parse("fused", &text).map_err(|e| TestCaseError::fail(format!("{}\n{text}", e[0])))?;
        prop_assert_eq!(print_func(&back[0]), text);
    }

    #[test]
    fn overwriting_a_donated_input_preserves_values(choices in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..12)) {
        let f = random_func(&choices);
        let options = kiln::CompileOptions { dump: Default::default(), ..Default::default() };
        let x = f.params[0];
        let (opt, _) = kiln::compile::optimize_donating(f.clone(), &options, &[x]);
        let want = run_func(&f, inputs()).unwrap();
        // `x` is handed over as the function's own buffer; `y` is borrowed.
        let ins = inputs();
        let stub = Tensor::zeros(kiln::f64, &[0]);
        let views = [stub.view(), ins[1].view()];
        let mut donated = vec![Some(ins[0].clone()), None];
        let mut state = kiln::runtime::interp::InterpState::default();
        for _ in 0..2 {
            let got = kiln::runtime::interp::run_func_into(&opt, &views, Vec::new(), &mut donated, &mut state).unwrap();
            prop_assert!(want[0].bit_eq(&got[0]), "{}\n{}", print_func(&f), print_func(&opt));
            donated[0] = Some(ins[0].clone());
        }
    }

    #[test]
    fn the_cpu_backend_agrees_with_the_interpreter(choices in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..12)) {
        let f = random_func(&choices);
        let refs: Vec<kiln::Tensor> = inputs();
        let views: Vec<kiln::TensorRef> = refs.iter().map(|t| t.view()).collect();
        let mut outs = Vec::new();
        for backend in [kiln::Backend::Interp, kiln::Backend::Cpu] {
            let options = kiln::CompileOptions { backend: Some(backend), ..Default::default() };
            let compiled = kiln::compile_func(f.clone(), &options).unwrap();
            outs.push(compiled.call(&views).unwrap().remove(0));
        }
        // Transcendentals are polynomial code in the backend and the C library in the
        // interpreter: a few ulps apart, which a chain of ops may grow a little.
        let (a, b) = (outs[0].to_f64_vec(), outs[1].to_f64_vec());
        let close = a.iter().zip(&b).all(|(&x, &y)| {
            (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()).max(1.0)
        });
        prop_assert!(outs[0].shape() == outs[1].shape() && close, "{}\n{a:?}\n{b:?}", print_func(&f));
    }

    #[test]
    fn the_parser_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let src = String::from_utf8_lossy(&bytes);
        let _ = parse("bytes", &src);
    }

    #[test]
    fn the_parser_never_panics_on_mutated_functions(seed in 0usize..10_000, cut in 0usize..400, insert in "[ -~]{0,8}") {
        let corpus = [
            "func @f(%x: f32[2, ?]) -> (f32[2]) {\n  %m = max %x {axes = [1]}\n  return %m\n}\n",
            "func @g(%c: bool[], %x: f64[3]) -> (f64[3]) {\n  %r = ifelse %c {\n    %a = exp %x\n    yield %a\n  } else {\n    yield %x\n  }\n  return %r\n}\n",
            "func @h() -> (f32[2, 2]) {\n  %c = const [[1.0, nan], [-inf, -0.0]] : f32[2, 2]\n  %s = slice %c {starts = [null], stops = [null], steps = [-1]}\n  return %s\n}\n",
        ];
        let src = corpus[seed % corpus.len()];
        let at = cut.min(src.len());
        let at = (0..=at).rev().find(|&i| src.is_char_boundary(i)).unwrap_or(0);
        let mutated = format!("{}{}{}", &src[..at], insert, &src[(at + seed % 5).min(src.len())..].trim_start_matches(|c: char| !c.is_ascii()));
        if let Ok(fs) = parse("mutated", &mutated) {
            // Whatever parses also prints and reparses.
            let text = print_func(&fs[0]);
            prop_assert!(parse("again", &text).is_ok(), "{text}");
        }
    }
}

#[test]
fn custom_ops_are_named_in_the_text_form_once_registered() {
    register_custom_op("tear_text", |p| {
        let dims = p.get_ints("dims").ok_or("tear needs `dims`")?;
        Ok(CustomOpRef::new(ops::Tear {
            dims: dims.iter().map(|&d| d as usize).collect(),
        }))
    });
    let src = "func @t(%x: f32[2, 2]) -> (f32[2], f32[2]) {\n  %a, %b = custom \"tear_text\" %x {dims = [1]} : (f32[2], f32[2])\n  return %a, %b\n}\n";
    let fs = parse("t.kir", src).unwrap_or_else(|e| panic!("{}", e[0]));
    // The op prints under its own name ("tear"), which is what it registered as a type.
    let text = print_func(&fs[0]);
    assert!(text.contains("custom \"tear\" %x {dims = [1]}"), "{text}");
    let x = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[2, 2]), vec![1.0, 2.0, 3.0, 4.0]).unwrap());
    let out = run_func(&fs[0], vec![x]).unwrap();
    assert_eq!(out[1].to_f64_vec(), vec![3.0, 4.0]);
    let e = parse(
        "u.kir",
        "func @u(%x: f32[2]) -> (f32[2]) {\n  %y = custom \"nobody\" %x\n  return %y\n}\n",
    )
    .unwrap_err();
    assert!(
        e[0].to_string().contains("u.kir:2:8") && e[0].to_string().contains("no custom op named"),
        "{}",
        e[0]
    );
}

/// A scalar program's cast writes its target twice, after `to` and as the result's dtype: a
/// program where the two differ is refused, naming both, rather than read as one of them.
#[test]
fn a_scalar_cast_whose_target_and_result_dtype_differ_is_refused() {
    use kiln::ir::scalar::{parse_program, ScalarOp};
    let ok = parse_program("%0 = input 0 : f32; %1 = cast %0 to f64 : f64; return %1").unwrap();
    assert!(matches!(ok.insts[1].op, ScalarOp::Cast(kiln::DType::F64)));
    let err =
        parse_program("%0 = input 0 : f32; %1 = cast %0 to f64 : i32; return %1").unwrap_err();
    assert!(err.contains("cast to f64") && err.contains("i32"), "{err}");
    let err =
        parse_program("%0 = input 0 : f32; %1 = cast %0 to f65 : f64; return %1").unwrap_err();
    assert!(err.contains("f65"), "{err}");
}

/// A function defined twice is reported where the second definition starts, naming the
/// first's line (it was reported at 1:1).
#[test]
fn a_function_defined_twice_is_reported_at_the_second_definition() {
    let src = "func @f(%x: f32[]) -> (f32[]) {\n  return %x\n}\n\nfunc @f(%y: f32[]) -> (f32[]) {\n  return %y\n}\n";
    let errs = parse("twice.kir", src).unwrap_err();
    let text = errs[0].to_string();
    assert!(
        text.contains("twice.kir:5:1") && text.contains("first at line 1"),
        "{text}"
    );
}
