use super::lang::{Head, KilnAnalysis, KilnEGraph, Node};
use super::rules::Builder;
use super::*;
use crate::ir::text::{parse, print_func};
use crate::ir::{DType, Op, TensorType, UnaryOp};

fn func(src: &str) -> Func {
    parse("test", src)
        .unwrap_or_else(|e| panic!("{e:?}"))
        .remove(0)
}

/// Tree cost and DAG cost disagree: `exp(x)` is cheaper than `neg(tanh(x))` as a tree, but
/// `tanh(x)` is computed anyway for the other root, so `neg` of it costs less in all.
#[test]
fn extraction_counts_a_shared_value_once() {
    let x_ty = TensorType::fixed(DType::F64, &[1000]);
    let mut eg = KilnEGraph::new(KilnAnalysis {
        param_types: vec![x_ty],
        ..Default::default()
    });
    let x = eg.add(Node::new(Head::Param(0), &[]));
    let mut b = Builder { eg: &mut eg };
    let t = b.unary(UnaryOp::Tanh, x).unwrap();
    let n = b.unary(UnaryOp::Neg, t).unwrap();
    let e = b.unary(UnaryOp::Exp, x).unwrap();
    // Not equal as numbers; only the choice between them is tested.
    eg.union(n, e);
    eg.rebuild();
    let c = eg.find(n);
    let sel = extract::extract(&eg, &[t, c]);
    let chosen = sel.node(c).unwrap();
    assert_eq!(chosen.args.as_slice(), &[eg.find(t)], "{chosen:?}");
    assert!(
        sel.cost < sel.greedy_cost,
        "{} {}",
        sel.cost,
        sel.greedy_cost
    );
    // With only the second root, exp is cheaper.
    let sel = extract::extract(&eg, &[c]);
    assert_eq!(sel.node(c).unwrap().args.as_slice(), &[x]);
}

#[test]
fn equal_ops_merge_and_constants_fold() {
    let f = func(
        "func @f(%x: f64[2]) -> (f64[2]) {
           %a = const 2.0 : f64[]
           %b = const 3.0 : f64[]
           %s = mul %a, %b
           %e = exp %x
           %g = exp %x
           %y = add %e, %g
           %z = mul %y, %s
           return %z
         }",
    );
    let (o, report) = run(&f, &Options::default());
    let text = print_func(&o);
    assert!(text.contains("%s = const 6.0 : f64[]"), "{text}");
    assert_eq!(text.matches("exp").count(), 1, "{text}");
    assert!(text.contains("%y = add %e, %e"), "{text}");
    assert_eq!(report.insts_out, 4, "{report}");
}

#[test]
fn folding_can_be_turned_off() {
    let f = func(
        "func @f() -> (f64[]) {
           %a = const 2.0 : f64[]
           %b = exp %a
           return %b
         }",
    );
    let options = Options {
        fold: false,
        ..Default::default()
    };
    let text = print_func(&run(&f, &options).0);
    assert!(text.contains("%b = exp %a"), "{text}");
    let text = print_func(&simplify(&f));
    assert!(text.contains("%b = const 7.38905609893065"), "{text}");
}

/// Regions are optimized as functions of what they read, and read the merged outer values.
#[test]
fn regions_are_optimized_and_renamed() {
    let f = func(
        "func @f(%c: bool[], %x: f64[2]) -> (f64[2]) {
           %one = const 1.0 : f64[]
           %a = exp %x
           %b = exp %x
           %r = ifelse %c {
             %m = mul %b, %one
             %d = add %m, %a
             yield %d
           } else {
             %n = neg %b
             %nn = neg %n
             yield %nn
           }
           return %r
         }",
    );
    let o = simplify(&f);
    crate::ir::verify::verify(&o).unwrap();
    let text = print_func(&o);
    assert!(text.contains("%d = add %a, %a"), "{text}");
    assert!(text.contains("} else {\n    yield %a\n"), "{text}");
    assert_eq!(text.matches("exp").count(), 1, "{text}");
}

#[test]
fn the_result_does_not_depend_on_the_run() {
    let f = func(
        "func @f(%x: f32[4, 3]) -> (f32[4], f32[4, 3]) {
           %e = exp %x
           %s = sum %e {axes = [1]}
           %l = log %s
           %one = const 1.0 : f32[]
           %p = add %one, %x
           %q = log %p
           %h = const 2.0 : f32[]
           %w = pow %q, %h
           return %l, %w
         }",
    );
    let first = print_func(&simplify(&f));
    for _ in 0..5 {
        assert_eq!(print_func(&simplify(&f)), first);
    }
}

/// With no iteration allowed, no rule runs: the function comes back merged and folded only.
#[test]
fn limits_give_fewer_rewrites() {
    let f = func(
        "func @f(%x: f64[2]) -> (f64[2]) {
           %z = const -0.0 : f64[]
           %a = add %x, %z
           return %a
         }",
    );
    let options = Options {
        limits: Limits {
            iterations: 0,
            ..Default::default()
        },
        ..Default::default()
    };
    let (o, report) = run(&f, &options);
    assert!(print_func(&o).contains("%a = add %x, %z"));
    assert!(report.phases.iter().all(|p| p.applied.is_empty()));
    assert!(report.to_string().contains("iteration limit"), "{report}");
    assert!(print_func(&simplify(&f)).contains("return %x"));
}

/// Adding +0.0 is not the identity on floats (`-0.0 + 0.0` is `+0.0`), adding -0.0 and
/// subtracting +0.0 are; on integers any zero is.
#[test]
fn only_neutral_zeros_are_dropped() {
    let kept = |src: &str| print_func(&simplify(&func(src)));
    let f = kept(
        "func @f(%x: f32[2]) -> (f32[2]) {
           %z = const 0.0 : f32[]
           %a = add %x, %z
           return %a
         }",
    );
    assert!(f.contains("add %x"), "{f}");
    for src in [
        "func @f(%x: f32[2]) -> (f32[2]) {\n %z = const 0.0 : f32[]\n %a = sub %x, %z\n return %a\n}",
        "func @f(%x: f32[2]) -> (f32[2]) {\n %z = const -0.0 : f32[]\n %a = add %z, %x\n return %a\n}",
        "func @f(%x: i32[2]) -> (i32[2]) {\n %z = const 0 : i32[]\n %a = add %x, %z\n return %a\n}",
    ] {
        let f = kept(src);
        assert!(f.contains("return %x"), "{f}");
    }
    let f = kept("func @f(%x: f32[2]) -> (f32[2]) {\n %z = const -0.0 : f32[]\n %a = sub %x, %z\n return %a\n}");
    assert!(f.contains("sub %x"), "{f}");
}

/// A stabilizing rule's result is kept even where the naive form would cost less.
#[test]
fn stabilized_forms_are_kept() {
    let f = func(
        "func @f(%x: f64[8]) -> (f64[8]) {
           %s = sigmoid %x
           %l = log %s
           return %l
         }",
    );
    let text = print_func(&simplify(&f));
    assert!(!text.contains("sigmoid"), "{text}");
}

#[test]
fn custom_and_random_ops() {
    let f = func(
        "func @f() -> (f64[2], f64[2]) {
           %a = uniform {seed = 3, shape = [2], dtype = f64}
           %b = uniform {seed = 3, shape = [2], dtype = f64}
           %c = uniform {seed = 4, shape = [2], dtype = f64}
           return %a, %b
         }",
    );
    let text = print_func(&simplify(&f));
    // Equal random ops are one; an unread one goes; none is folded.
    assert_eq!(text.matches("uniform").count(), 1, "{text}");
    assert!(text.contains("return %a, %a"), "{text}");
    assert!(!matches!(simplify(&f).body[0].op, Op::Const(_)));
}
