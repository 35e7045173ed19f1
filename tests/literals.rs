//! Plain numbers next to tensors (docs/reference/semantics.md): a literal adopts the tensor's dtype when
//! that dtype holds it exactly and is a type error otherwise, one that names the literal, the
//! line that wrote it, and the cast to write instead. Never a silent truncation.

use kiln::{function, Backend, Graph};
use ndarray::array;

fn err_of(v: &kiln::Var) -> String {
    v.check().err().map(|e| e.to_string()).unwrap_or_default()
}

#[test]
fn a_fraction_next_to_an_integer_tensor_is_a_type_error() {
    let g = Graph::new();
    let i = g.input("i", kiln::i32, [Some(2)]);
    let line = line!() + 1;
    let y = &i * 2.5;
    let e = err_of(&y);
    assert!(e.contains("2.5") && e.contains("i32"), "{e}");
    assert!(e.contains(".cast("), "suggests a cast: {e}");
    assert!(
        e.contains(&format!("literals.rs:{line}")),
        "names the line: {e}"
    );
    // The literal on the left too, and through compile.
    let z = 2.5 - &i;
    assert!(err_of(&z).contains("2.5"));
    let err = function(&[&i], &[&z]).compile().err().unwrap().to_string();
    assert!(err.contains("2.5"), "{err}");
}

#[test]
fn literals_the_dtype_holds_are_taken_exactly() {
    for backend in [Backend::Interp, Backend::Cpu] {
        let g = Graph::new();
        let i = g.input("i", kiln::i32, [Some(2)]);
        let x = g.input("x", kiln::f32, [Some(2)]);
        let y = &i * 2.0 + 3;
        let z = &x * 0.1 + 16_777_216i64;
        let f = function(&[&i, &x], &[&y, &z])
            .backend(backend)
            .compile()
            .unwrap();
        let out = f
            .call(&[
                kiln::TensorRef::from(array![1i32, -4].into_dyn().view()),
                kiln::TensorRef::from(array![1.0f32, 2.0].into_dyn().view()),
            ])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![5.0, -5.0]);
        let z = out[1].as_f32().unwrap();
        assert_eq!(z[[0]], 0.1f32 + 16_777_216.0);
    }
}

#[test]
fn values_out_of_range_or_not_exact_are_type_errors() {
    let g = Graph::new();
    let i = g.input("i", kiln::i32, [Some(2)]);
    let x = g.input("x", kiln::f32, [Some(2)]);
    let b = g.input("b", kiln::bool, [Some(2)]);
    let l = g.input("l", kiln::i64, [Some(2)]);
    for (v, lit) in [
        (&i + 3_000_000_000i64, "3000000000"),
        (&i + f64::NAN, "NaN"),
        (&x * 1e300, "1e300"),
        (&x + 16_777_217i64, "16777217"),
        (&l * 0.5, "0.5"),
        (b.or(2i64), "2"),
    ] {
        let e = err_of(&v);
        assert!(e.contains(lit), "{lit}: {e}");
    }
    assert!(b.or(1i64).check().is_ok());
}
