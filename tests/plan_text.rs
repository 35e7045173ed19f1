//! The plan's text form parses back to a plan that runs (`kiln::lower::parse_plan`, against
//! the function it was lowered from), and a hand edit of the text is honoured when it runs.

use kiln::lower::{lower_with, parse_plan, LowerOptions};

#[test]
fn a_parsed_plan_runs_as_the_lowered_one() {
    let f = kiln::ir::text::parse(
        "t.kir",
        "func @f(%x: f32[3, 4]) -> (f32[4, 3], f32[3]) {
           %e = exp %x
           %t = transpose %e {perm = [1, 0]}
           %s = sum %t {axes = [0]}
           return %t, %s
         }",
    )
    .unwrap()
    .remove(0);
    let plan = lower_with(&f, LowerOptions::all());
    let x = kiln::Tensor::F32(ndarray::ArrayD::from_shape_fn(
        ndarray::IxDyn(&[3, 4]),
        |i| (i[0] * 4 + i[1]) as f32 / 7.0,
    ));
    let run = |p: &kiln::lower::Plan| {
        kiln::runtime::interp::run_plan_into(
            &f,
            p,
            &[x.view()],
            Vec::new(),
            &mut [],
            &mut Default::default(),
        )
        .unwrap()
    };
    let back = parse_plan("t", &plan.to_string(), &f).unwrap();
    let (a, b) = (run(&plan), run(&back));
    assert!(a.iter().zip(&b).all(|(a, b)| a.bit_eq(b)));
    // An edit is honoured: the sum's argument read as the exp, not its transpose, in a
    // plan whose reduction axis and access say so.
    let edited = plan
        .to_string()
        .replace("reduce sum axes [0] %3", "reduce sum axes [1] %2")
        .replace(
            "over [4, 3] reads (0, 1) acc",
            "over [3, 4] reads (0, 1) acc",
        );
    assert_ne!(edited, plan.to_string());
    let e = parse_plan("t", &edited, &f).unwrap();
    assert!(run(&e)[1].bit_eq(&b[1]), "{edited}");
}
