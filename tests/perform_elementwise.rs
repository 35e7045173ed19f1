//! `perform` of the elementwise ops against values computed with numpy (written in here), with
//! each output's type checked against `infer`.
// Expected values are numpy's output written out literally, some of which are well-known
// constants; spelling them as `std` constants would hide where they came from.
#![allow(clippy::approx_constant)]

#[path = "perform_support/mod.rs"]
mod support;

use kiln::ir::{BinaryOp, DType, Op, UnaryOp};
use kiln::Tensor;
use support::*;

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

fn un(u: UnaryOp, x: &Tensor) -> Tensor {
    run(&Op::Unary(u), &[x])
}
fn bin(b: BinaryOp, x: &Tensor, y: &Tensor) -> Tensor {
    run(&Op::Binary(b), &[x, y])
}

const XS: [f64; 6] = [-2.5, -0.5, 0.0, 0.3, 1.0, 4.0];

/// (op, numpy in f64, numpy on the f32 inputs rounded to f32) on `XS`.
fn transcendental_cases() -> Vec<(UnaryOp, [f64; 6], [f64; 6])> {
    use UnaryOp::*;
    vec![
        (
            Exp,
            [
                0.0820849986238988,
                0.6065306597126334,
                1.0,
                1.3498588075760032,
                2.718281828459045,
                54.598150033144236,
            ],
            [
                0.08208499848842621,
                0.6065306663513184,
                1.0,
                1.3498588800430298,
                2.7182817459106445,
                54.598148345947266,
            ],
        ),
        (
            Expm1,
            [
                -0.9179150013761012,
                -0.3934693402873666,
                0.0,
                0.3498588075760031,
                1.7182818284590453,
                53.598150033144236,
            ],
            [
                -0.9179149866104126,
                -0.39346933364868164,
                0.0,
                0.349858820438385,
                1.718281865119934,
                53.598148345947266,
            ],
        ),
        (
            Sin,
            [
                -0.5984721441039565,
                -0.479425538604203,
                0.0,
                0.29552020666133955,
                0.8414709848078965,
                -0.7568024953079282,
            ],
            [
                -0.5984721183776855,
                -0.4794255495071411,
                0.0,
                0.29552021622657776,
                0.8414709568023682,
                -0.756802499294281,
            ],
        ),
        (
            Cos,
            [
                -0.8011436155469337,
                0.8775825618903728,
                1.0,
                0.955336489125606,
                0.5403023058681398,
                -0.6536436208636119,
            ],
            [
                -0.8011435866355896,
                0.8775825500488281,
                1.0,
                0.9553365111351013,
                0.5403022766113281,
                -0.6536436080932617,
            ],
        ),
        (
            Tan,
            [
                0.7470222972386603,
                -0.5463024898437905,
                0.0,
                0.3093362496096232,
                1.5574077246549023,
                1.1578212823495775,
            ],
            [
                0.747022271156311,
                -0.5463024973869324,
                0.0,
                0.30933627486228943,
                1.5574077367782593,
                1.1578212976455688,
            ],
        ),
        (
            Tanh,
            [
                -0.9866142981514303,
                -0.46211715726000974,
                0.0,
                0.2913126124515909,
                0.7615941559557649,
                0.999329299739067,
            ],
            [
                -0.9866142868995667,
                -0.46211716532707214,
                0.0,
                0.29131263494491577,
                0.7615941762924194,
                0.9993293285369873,
            ],
        ),
        (
            Sigmoid,
            [
                0.07585818002124355,
                0.3775406687981454,
                0.5,
                0.574442516811659,
                0.7310585786300049,
                0.9820137900379085,
            ],
            [
                0.07585818320512772,
                0.3775406777858734,
                0.5,
                0.5744425058364868,
                0.7310585975646973,
                0.9820137619972229,
            ],
        ),
        (
            Erf,
            [
                -0.999593047982555,
                -0.5204998778130465,
                0.0,
                0.3286267594591274,
                0.8427007929497149,
                0.9999999845827421,
            ],
            [
                -0.9995930194854736,
                -0.5204998850822449,
                0.0,
                0.3286267817020416,
                0.8427007794380188,
                1.0,
            ],
        ),
    ]
}

#[test]
fn transcendentals_match_numpy_within_a_few_ulps_in_both_precisions() {
    let x64 = f64s(&[6], &XS);
    let x32 = f32s(&[6], &XS.map(|v| v as f32));
    for (op, e64, e32) in transcendental_cases() {
        close(&un(op, &x64), &[6], &e64, 2);
        close(&un(op, &x32), &[6], &e32, 2);
    }
}

#[test]
fn logs_and_roots_with_special_values() {
    let y = [0.0, 0.5, 1.0, 2.0, 10.0, INF];
    let x = f64s(&[6], &y);
    use UnaryOp::*;
    let ln2 = 0.6931471805599453;
    close(
        &un(Log, &x),
        &[6],
        &[-INF, -ln2, 0.0, ln2, 2.302585092994046, INF],
        1,
    );
    close(
        &un(Log1p, &x),
        &[6],
        &[
            0.0,
            0.4054651081081644,
            ln2,
            1.0986122886681098,
            2.3978952727983707,
            INF,
        ],
        1,
    );
    exact(
        &un(Sqrt, &x),
        &[6],
        &[
            0.0,
            0.7071067811865476,
            1.0,
            1.4142135623730951,
            3.1622776601683795,
            INF,
        ],
    );
    close(
        &un(Rsqrt, &x),
        &[6],
        &[
            INF,
            1.414213562373095,
            1.0,
            0.7071067811865475,
            0.31622776601683794,
            0.0,
        ],
        1,
    );
    // Negative inputs and NaN.
    let bad = f64s(&[3], &[-1.0, NAN, -0.0]);
    exact(&un(Log, &bad), &[3], &[NAN, NAN, -INF]);
    exact(&un(Sqrt, &bad), &[3], &[NAN, NAN, -0.0]);
    exact(&un(Log1p, &f64s(&[2], &[-1.0, -2.0])), &[2], &[-INF, NAN]);
    // expm1 and log1p keep their accuracy near 0, where exp(x) - 1 would not.
    close(
        &un(Expm1, &f64s(&[1], &[1e-10])),
        &[1],
        &[1.00000000005e-10],
        1,
    );
    close(&un(Log1p, &f32s(&[1], &[1e-7])), &[1], &[9.999999e-8], 1);
    exact(
        &un(Reciprocal, &f64s(&[4], &[2.0, -0.0, 0.0, INF])),
        &[4],
        &[0.5, -INF, INF, 0.0],
    );
}

#[test]
fn sigmoid_is_stable_at_both_ends() {
    let x = f64s(&[5], &[-800.0, -40.0, 40.0, 800.0, NAN]);
    let y = un(UnaryOp::Sigmoid, &x);
    close(&y, &[5], &[0.0, 4.248354255291589e-18, 1.0, 1.0, NAN], 2);
    let y32 = un(UnaryOp::Sigmoid, &f32s(&[3], &[-100.0, -20.0, 100.0]));
    close(&y32, &[3], &[3.7200760e-44, 2.0611537e-9, 1.0], 2);
    exact(
        &un(UnaryOp::Tanh, &f64s(&[2], &[-INF, 1e3])),
        &[2],
        &[-1.0, 1.0],
    );
    exact(
        &un(UnaryOp::Erf, &f32s(&[3], &[f32::NEG_INFINITY, 10.0, -0.0])),
        &[3],
        &[-1.0, 1.0, -0.0],
    );
}

#[test]
fn rounding_is_half_to_even_and_keeps_signed_zero() {
    let x = f64s(&[8], &[0.5, 1.5, -2.5, 2.5, -0.5, 2.4999, -1.7, NAN]);
    exact(
        &un(UnaryOp::Round, &x),
        &[8],
        &[0.0, 2.0, -2.0, 2.0, -0.0, 2.0, -2.0, NAN],
    );
    exact(
        &un(UnaryOp::Floor, &x),
        &[8],
        &[0.0, 1.0, -3.0, 2.0, -1.0, 2.0, -2.0, NAN],
    );
    exact(
        &un(UnaryOp::Ceil, &x),
        &[8],
        &[1.0, 2.0, -2.0, 3.0, -0.0, 3.0, -1.0, NAN],
    );
    let x32 = f32s(&[3], &[0.5, 1.5, -2.5]);
    exact(&un(UnaryOp::Round, &x32), &[3], &[0.0, 2.0, -2.0]);
    // Integers are left as they are.
    for u in [UnaryOp::Round, UnaryOp::Floor, UnaryOp::Ceil] {
        same(&un(u, &i32s(&[2], &[-3, 7])), &i32s(&[2], &[-3, 7]));
    }
}

#[test]
fn sign_abs_neg_square_relu_follow_numpy() {
    use UnaryOp::*;
    let x = f64s(&[6], &[-3.0, -0.0, 0.0, 2.0, NAN, -INF]);
    exact(&un(Sign, &x), &[6], &[-1.0, 0.0, 0.0, 1.0, NAN, -1.0]);
    exact(&un(Abs, &x), &[6], &[3.0, 0.0, 0.0, 2.0, NAN, INF]);
    exact(&un(Neg, &x), &[6], &[3.0, 0.0, -0.0, -2.0, NAN, INF]);
    exact(&un(Square, &x), &[6], &[9.0, 0.0, 0.0, 4.0, NAN, INF]);
    // relu is maximum(x, 0): NaN stays NaN, -0.0 becomes 0.0.
    exact(&un(Relu, &x), &[6], &[0.0, 0.0, 0.0, 2.0, NAN, 0.0]);
    let i = i32s(&[5], &[-5, 0, 7, i32::MIN, i32::MAX]);
    same(&un(Sign, &i), &i32s(&[5], &[-1, 0, 1, -1, 1]));
    // abs and neg of MIN wrap to MIN as in numpy; square wraps.
    same(&un(Abs, &i), &i32s(&[5], &[5, 0, 7, i32::MIN, i32::MAX]));
    same(&un(Neg, &i), &i32s(&[5], &[5, 0, -7, i32::MIN, -i32::MAX]));
    same(&un(Square, &i), &i32s(&[5], &[25, 0, 49, 0, 1]));
    same(&un(Relu, &i), &i32s(&[5], &[0, 0, 7, 0, i32::MAX]));
    let l = i64s(&[3], &[-4, 3, i64::MIN]);
    same(&un(Abs, &l), &i64s(&[3], &[4, 3, i64::MIN]));
    same(&un(Square, &l), &i64s(&[3], &[16, 9, 0]));
    same(
        &un(Not, &bools(&[2], &[true, false])),
        &bools(&[2], &[false, true]),
    );
}

#[test]
fn unary_ops_refuse_dtypes_they_do_not_take_at_run_time() {
    run_err(&Op::Unary(UnaryOp::Exp), &[&i32s(&[1], &[1])]);
    run_err(&Op::Unary(UnaryOp::Neg), &[&bools(&[1], &[true])]);
    run_err(&Op::Unary(UnaryOp::Not), &[&f32s(&[1], &[1.0])]);
    run_err(&Op::Unary(UnaryOp::Exp), &[]);
}

#[test]
fn arithmetic_broadcasts_as_numpy() {
    use BinaryOp::*;
    // [2,1,3] with [4,1] gives [2,4,3].
    let a = f64s(&[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f64s(&[4, 1], &[10.0, 20.0, 30.0, 40.0]);
    let y = bin(Add, &a, &b);
    let mut expect = vec![];
    for i in 0..2 {
        for j in 0..4 {
            for k in 0..3 {
                expect.push((i * 3 + k + 1) as f64 + 10.0 * (j + 1) as f64);
            }
        }
    }
    exact(&y, &[2, 4, 3], &expect);
    // A 0-d scalar on either side.
    let s = f64s(&[], &[2.0]);
    let v = f64s(&[3], &[1.0, 2.0, 3.0]);
    exact(&bin(Sub, &s, &v), &[3], &[1.0, 0.0, -1.0]);
    exact(&bin(Div, &v, &s), &[3], &[0.5, 1.0, 1.5]);
    exact(&bin(Mul, &s, &s), &[], &[4.0]);
    // Empty dims broadcast against 1 and stay empty.
    let e = f32s(&[0, 3], &[]);
    let r = f32s(&[1, 3], &[1.0, 2.0, 3.0]);
    exact(&bin(Add, &e, &r), &[0, 3], &[]);
    exact(
        &bin(Add, &f32s(&[2, 0], &[]), &f32s(&[1], &[5.0])),
        &[2, 0],
        &[],
    );
    // Ints wrap.
    same(
        &bin(Add, &i32s(&[2], &[i32::MAX, 1]), &i32s(&[], &[1])),
        &i32s(&[2], &[i32::MIN, 2]),
    );
    same(
        &bin(Mul, &i64s(&[1], &[i64::MAX]), &i64s(&[1], &[2])),
        &i64s(&[1], &[-2]),
    );
    same(
        &bin(Sub, &i64s(&[1], &[i64::MIN]), &i64s(&[1], &[1])),
        &i64s(&[1], &[i64::MAX]),
    );
}

#[test]
fn mismatched_shapes_are_errors_at_run_time() {
    // Shapes that infer could not see (unknown dims) fail cleanly in perform.
    let e = run_err(
        &Op::Binary(BinaryOp::Add),
        &[&f32s(&[3], &[0.0; 3]), &f32s(&[4], &[0.0; 4])],
    );
    assert!(e.contains("[3]") && e.contains("[4]"), "{e}");
    run_err(
        &Op::Binary(BinaryOp::Add),
        &[&f32s(&[2, 3], &[0.0; 6]), &f32s(&[3, 3], &[0.0; 9])],
    );
    run_err(
        &Op::Binary(BinaryOp::Add),
        &[&f32s(&[0], &[]), &f32s(&[2], &[0.0; 2])],
    );
    run_err(
        &Op::Binary(BinaryOp::Add),
        &[&f32s(&[1], &[0.0]), &f64s(&[1], &[0.0])],
    );
    run_err(
        &Op::Binary(BinaryOp::Div),
        &[&i32s(&[1], &[1]), &i32s(&[1], &[1])],
    );
    run_err(
        &Op::Binary(BinaryOp::And),
        &[&i32s(&[1], &[1]), &i32s(&[1], &[1])],
    );
    run_err(
        &Op::Binary(BinaryOp::Add),
        &[&bools(&[1], &[true]), &bools(&[1], &[true])],
    );
}

#[test]
fn integer_floordiv_and_mod_follow_numpy_and_give_zero_for_zero_divisors() {
    use BinaryOp::*;
    let a = i32s(&[8], &[7, -7, 7, -7, 5, i32::MIN, i32::MIN, 0]);
    let b = i32s(&[8], &[2, 2, -2, -2, 0, -1, 0, 0]);
    same(
        &bin(FloorDiv, &a, &b),
        &i32s(&[8], &[3, -4, -4, 3, 0, i32::MIN, 0, 0]),
    );
    same(&bin(Mod, &a, &b), &i32s(&[8], &[1, 1, -1, -1, 0, 0, 0, 0]));
    let a = i64s(&[4], &[i64::MIN, 9, -9, i64::MAX]);
    let b = i64s(&[4], &[-1, 0, 4, -3]);
    same(
        &bin(FloorDiv, &a, &b),
        &i64s(&[4], &[i64::MIN, 0, -3, -3074457345618258603]),
    );
    same(&bin(Mod, &a, &b), &i64s(&[4], &[0, 0, 3, -2]));
}

#[test]
fn float_floordiv_and_mod_follow_numpy() {
    use BinaryOp::*;
    let a = f64s(&[8], &[-1.0, 1.0, 5.0, -1.0, INF, 7.5, -7.5, -0.0]);
    let b = f64s(&[8], &[3.0, -3.0, 0.0, INF, 3.0, 2.0, 2.0, 3.0]);
    exact(
        &bin(Mod, &a, &b),
        &[8],
        &[2.0, -2.0, NAN, INF, NAN, 1.5, 0.5, 0.0],
    );
    exact(
        &bin(FloorDiv, &a, &b),
        &[8],
        &[-1.0, -1.0, INF, -1.0, NAN, 3.0, -4.0, -0.0],
    );
    let a = f32s(&[4], &[-1.0, 1.0, 0.0, -6.0]);
    let b = f32s(&[4], &[3.0, -3.0, 0.0, -4.0]);
    exact(&bin(Mod, &a, &b), &[4], &[2.0, -2.0, NAN, -2.0]);
    exact(&bin(FloorDiv, &a, &b), &[4], &[-1.0, -1.0, NAN, 1.0]);
    // mod(0, -3) is -0.0 (the sign of the divisor).
    exact(
        &bin(Mod, &f64s(&[1], &[0.0]), &f64s(&[1], &[-3.0])),
        &[1],
        &[-0.0],
    );
}

#[test]
fn pow_on_floats_and_on_integers() {
    use BinaryOp::*;
    let a = f64s(&[5], &[2.0, -8.0, 0.0, 4.0, NAN]);
    let b = f64s(&[5], &[10.0, 1.0 / 3.0, -1.0, 0.5, 0.0]);
    // (-8) ** (1/3) is NaN in numpy; NaN ** 0 is 1.
    close(&bin(Pow, &a, &b), &[5], &[1024.0, NAN, INF, 2.0, 1.0], 1);
    // Integer powers by repeated squaring, wrapping; a negative exponent gives the integer
    // part of 1 / x**n (numpy refuses these).
    let a = i32s(&[8], &[3, -2, 2, 0, 1, -1, -1, 5]);
    let b = i32s(&[8], &[4, 3, 31, 0, -5, -3, -2, -1]);
    same(
        &bin(Pow, &a, &b),
        &i32s(&[8], &[81, -8, i32::MIN, 1, 1, -1, 1, 0]),
    );
    let a = i64s(&[2], &[3, 2]);
    let b = i64s(&[2], &[40, 64]);
    same(
        &bin(Pow, &a, &b),
        &i64s(&[2], &[12157665459056928801u64 as i64, 0]),
    );
}

#[test]
fn maximum_and_minimum_propagate_nan() {
    use BinaryOp::*;
    let a = f64s(&[5], &[NAN, 1.0, 3.0, -INF, 2.0]);
    let b = f64s(&[5], &[1.0, NAN, 2.0, 0.0, 2.0]);
    exact(&bin(Maximum, &a, &b), &[5], &[NAN, NAN, 3.0, 0.0, 2.0]);
    exact(&bin(Minimum, &a, &b), &[5], &[NAN, NAN, 2.0, -INF, 2.0]);
    let a = f32s(&[2], &[f32::NAN, -1.0]);
    let b = f32s(&[], &[0.0]);
    exact(&bin(Maximum, &a, &b), &[2], &[NAN, 0.0]);
    same(
        &bin(Minimum, &i32s(&[3], &[1, -5, 9]), &i32s(&[3], &[2, -6, 9])),
        &i32s(&[3], &[1, -6, 9]),
    );
}

#[test]
fn comparisons_give_bool_and_nan_compares_unequal() {
    use BinaryOp::*;
    let a = f64s(&[4], &[1.0, NAN, 2.0, -0.0]);
    let b = f64s(&[4], &[2.0, NAN, 2.0, 0.0]);
    let cases = [
        (Lt, [true, false, false, false]),
        (Le, [true, false, true, true]),
        (Gt, [false, false, false, false]),
        (Ge, [false, false, true, true]),
        (Eq, [false, false, true, true]),
        (Ne, [true, true, false, false]),
    ];
    for (op, e) in cases {
        same(&bin(op, &a, &b), &bools(&[4], &e));
    }
    // Broadcast, on integers and on bools.
    same(
        &bin(Lt, &i64s(&[2, 1], &[1, 5]), &i64s(&[3], &[0, 1, 6])),
        &bools(&[2, 3], &[false, false, true, false, false, true]),
    );
    same(
        &bin(Gt, &bools(&[2], &[true, false]), &bools(&[], &[false])),
        &bools(&[2], &[true, false]),
    );
    same(
        &bin(
            And,
            &bools(&[2, 1], &[true, false]),
            &bools(&[2], &[true, false]),
        ),
        &bools(&[2, 2], &[true, false, false, false]),
    );
    same(
        &bin(
            Or,
            &bools(&[2], &[true, false]),
            &bools(&[2], &[false, false]),
        ),
        &bools(&[2], &[true, false]),
    );
}

#[test]
fn select_broadcasts_three_ways() {
    let c = bools(&[2, 1], &[true, false]);
    let a = i32s(&[3], &[1, 2, 3]);
    let b = i32s(&[], &[0]);
    same(
        &run(&Op::Select, &[&c, &a, &b]),
        &i32s(&[2, 3], &[1, 2, 3, 0, 0, 0]),
    );
    let y = run(
        &Op::Select,
        &[
            &bools(&[3], &[false, true, false]),
            &f64s(&[], &[NAN]),
            &f64s(&[3], &[1.0, 2.0, -0.0]),
        ],
    );
    exact(&y, &[3], &[1.0, NAN, -0.0]);
    run_err(&Op::Select, &[&i32s(&[1], &[1]), &a, &a]);
    run_err(&Op::Select, &[&c, &a, &f32s(&[1], &[0.0])]);
    run_err(&Op::Select, &[&bools(&[2], &[true, true]), &a, &a]);
}

#[test]
fn casts_truncate_saturate_and_map_nan_to_zero() {
    let x = f64s(&[7], &[2.7, -2.7, 1e20, -1e20, NAN, INF, -0.0]);
    same(
        &run(&Op::Cast { to: DType::I32 }, &[&x]),
        &i32s(&[7], &[2, -2, i32::MAX, i32::MIN, 0, i32::MAX, 0]),
    );
    same(
        &run(&Op::Cast { to: DType::I64 }, &[&x]),
        &i64s(&[7], &[2, -2, i64::MAX, i64::MIN, 0, i64::MAX, 0]),
    );
    same(
        &run(&Op::Cast { to: DType::Bool }, &[&x]),
        &bools(&[7], &[true, true, true, true, true, true, false]),
    );
    exact(
        &run(&Op::Cast { to: DType::F32 }, &[&x]),
        &[7],
        &[
            2.7f32 as f64,
            -2.7f32 as f64,
            1e20f32 as f64,
            -1e20f32 as f64,
            NAN,
            INF,
            -0.0,
        ],
    );
    let b = bools(&[2], &[true, false]);
    exact(&run(&Op::Cast { to: DType::F64 }, &[&b]), &[2], &[1.0, 0.0]);
    same(
        &run(&Op::Cast { to: DType::I64 }, &[&b]),
        &i64s(&[2], &[1, 0]),
    );
    same(&run(&Op::Cast { to: DType::Bool }, &[&b]), &b);
    let i = i64s(&[3], &[(1 << 40) + 7, -1, 0]);
    same(
        &run(&Op::Cast { to: DType::I32 }, &[&i]),
        &i32s(&[3], &[7, -1, 0]),
    );
    same(
        &run(&Op::Cast { to: DType::Bool }, &[&i]),
        &bools(&[3], &[true, true, false]),
    );
    // i64 to f32 rounds once: through f64, 2^60 + 2^36 + 1 would round to a tie and then to
    // 2^60; numpy gives 2^60 + 2^37.
    let big = i64s(&[1], &[(1 << 60) + (1 << 36) + 1]);
    exact(
        &run(&Op::Cast { to: DType::F32 }, &[&big]),
        &[1],
        &[((1u64 << 60) + (1u64 << 37)) as f64],
    );
    exact(
        &run(&Op::Cast { to: DType::F32 }, &[&f64s(&[1], &[1e40])]),
        &[1],
        &[INF],
    );
}

#[test]
fn every_unary_and_binary_op_runs_on_every_dtype_infer_accepts() {
    // For each op and dtype, perform succeeds exactly where infer does, and with its type.
    let samples = [
        bools(&[2, 1], &[true, false]),
        i32s(&[2, 1], &[3, -2]),
        i64s(&[2, 1], &[3, -2]),
        f32s(&[2, 1], &[0.5, -1.5]),
        f64s(&[2, 1], &[0.5, -1.5]),
    ];
    let rhs = [
        bools(&[3], &[true, false, true]),
        i32s(&[3], &[1, 2, 0]),
        i64s(&[3], &[1, 2, 0]),
        f32s(&[3], &[1.0, 2.0, 0.0]),
        f64s(&[3], &[1.0, 2.0, 0.0]),
    ];
    let mut checked = 0;
    for (x, y) in samples.iter().zip(&rhs) {
        for u in UnaryOp::ALL {
            let op = Op::Unary(u);
            if inferred(&op, &[x]).is_ok() {
                run(&op, &[x]);
                checked += 1;
            } else {
                run_err(&op, &[x]);
            }
        }
        for b in BinaryOp::ALL {
            let op = Op::Binary(b);
            if inferred(&op, &[x, y]).is_ok() {
                assert_eq!(run(&op, &[x, y]).shape(), &[2, 3]);
                checked += 1;
            } else {
                run_err(&op, &[x, y]);
            }
        }
        for to in DType::ALL {
            run(&Op::Cast { to }, &[x]);
        }
    }
    assert!(checked > 100, "{checked}");
}
