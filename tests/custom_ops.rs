//! User-defined ops take part in everything built-in ops do: type checks, the interpreter,
//! in-place planning, hidden outputs, merging, the registry; a panic inside one is an `Err`.

#[allow(dead_code)]
#[path = "../examples/custom_ops/ops.rs"]
mod ops;

use kiln::custom::{
    lookup_custom_op, register_custom_op, CustomOp, CustomOpRef, OpParams, PerformContext,
};
use kiln::ir::Op;
use kiln::{function, Error, Graph, Tensor, TensorType};
use ndarray::{array, ArrayD, IxDyn};
use ops::{AddWithBuffer, Permute, Scale, Tear};
use std::sync::atomic::Ordering;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec()
}

/// Equal within 4 ulps: `exp` is compiled polynomial code on the CPU backend, the C library's
/// in `want`.
fn assert_near(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 4.0 * f64::EPSILON * w.abs(),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn tear_gives_one_output_per_position_along_the_other_dims() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3), Some(2)]);
    let parts = g
        .try_apply_custom(Tear { dims: vec![0, 2] }, &[&x])
        .unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].ty(), TensorType::fixed(kiln::f32, &[2, 2]));
    let refs: Vec<&kiln::Var> = parts.iter().collect();
    let f = function(&[&x], &refs).compile().unwrap();
    let xv = ArrayD::from_shape_fn(IxDyn(&[2, 3, 2]), |i| {
        (i[0] * 100 + i[1] * 10 + i[2]) as f32
    });
    let out = f.call(&[xv.view()]).unwrap();
    assert_eq!(vals(&out[1]), vec![10.0, 11.0, 110.0, 111.0]);
    assert_eq!(vals(&out[2]), vec![20.0, 21.0, 120.0, 121.0]);
    // make_node errors carry the caller's location.
    let e = g
        .try_apply_custom(Tear { dims: vec![3] }, &[&x])
        .unwrap_err();
    assert!(
        e.to_string().contains("custom_ops.rs") && e.to_string().contains("rank 3"),
        "{e}"
    );
    let y = g.input("y", kiln::f32, [None]);
    assert!(g.try_apply_custom(Tear { dims: vec![0] }, &[&y]).is_err());
}

fn permute(perm: &[usize]) -> Permute {
    Permute {
        perm: perm.to_vec(),
        in_place_runs: Default::default(),
    }
}

#[test]
fn permute_runs_in_place_only_when_its_input_is_dead() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2), Some(3)]);
    let xv: ArrayD<f32> = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn();
    let expected = vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0];

    // Input of the function: never overwritten.
    let p = permute(&[1, 0]);
    let runs = p.in_place_runs.clone();
    let y = g.apply_custom(p, &[&x]);
    let f = function(&[&x], &[&y[0]]).compile().unwrap();
    assert_eq!(vals(&f.call(&[xv.view()]).unwrap()[0]), expected);
    assert_eq!(runs.load(Ordering::Relaxed), 0);

    // A temporary read only by the permute: overwritten in place.
    let scaled = g.apply_custom(Scale::new(1.0), &[&x]);
    let p = permute(&[1, 0]);
    let runs = p.in_place_runs.clone();
    let y = g.apply_custom(p, &[&scaled[0]]);
    let f = function(&[&x], &[&y[0]]).compile().unwrap();
    assert_eq!(vals(&f.call(&[xv.view()]).unwrap()[0]), expected);
    assert_eq!(runs.load(Ordering::Relaxed), 1);

    // A temporary also returned as an output: must survive.
    let p = permute(&[1, 0]);
    let runs = p.in_place_runs.clone();
    let y = g.apply_custom(p, &[&scaled[0]]);
    let f = function(&[&x], &[&y[0], &scaled[0]]).compile().unwrap();
    let out = f.call(&[xv.view()]).unwrap();
    assert_eq!(vals(&out[0]), expected);
    assert_eq!(vals(&out[1]), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(runs.load(Ordering::Relaxed), 0);
}

#[test]
fn hidden_buffers_are_kept_between_calls_and_grow_when_needed() {
    let g = Graph::new();
    let a = g.input("a", kiln::f32, [None]);
    let b = g.input("b", kiln::f32, [None]);
    let op = AddWithBuffer::default();
    let allocs = op.allocations.clone();
    let s = g.try_apply_custom(op, &[&a, &b]).unwrap();
    assert_eq!(s.len(), 1, "the hidden output is not shown");
    let f = function(&[&a, &b], &[&s[0]]).compile().unwrap();
    let small = array![1.0f32, 2.0].into_dyn();
    for _ in 0..3 {
        assert_eq!(
            vals(&f.call(&[small.view(), small.view()]).unwrap()[0]),
            vec![2.0, 4.0]
        );
    }
    assert_eq!(allocs.load(Ordering::Relaxed), 1);
    let four = array![1.0f32, 1.0, 1.0, 1.0].into_dyn();
    assert_eq!(
        vals(&f.call(&[four.view(), four.view()]).unwrap()[0]),
        vec![2.0; 4]
    );
    assert_eq!(
        allocs.load(Ordering::Relaxed),
        1,
        "4 elements fit the buffer of 2 * 2"
    );
    let five = ArrayD::from_elem(IxDyn(&[5]), 1.0f32);
    assert_eq!(
        vals(&f.call(&[five.view(), five.view()]).unwrap()[0]),
        vec![2.0; 5]
    );
    assert_eq!(allocs.load(Ordering::Relaxed), 2);
}

#[derive(Debug)]
struct Explodes;

impl CustomOp for Explodes {
    fn name(&self) -> &str {
        "explodes"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn perform(
        &self,
        _: &[&Tensor],
        _: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        panic!("boom inside a user's op")
    }
}

#[test]
fn a_panic_inside_perform_is_an_error_not_an_abort() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(1)]);
    let y = g.apply_custom(Explodes, &[&x]);
    let f = function(&[&x], &[&y[0]]).compile().unwrap();
    let e = f.call(&[array![1.0f32].into_dyn().view()]).unwrap_err();
    assert!(
        matches!(e, Error::Runtime(_)) && e.to_string().contains("boom"),
        "{e}"
    );
    // The function still works afterwards (nothing was left locked).
    assert!(f.call(&[array![1.0f32].into_dyn().view()]).is_err());
}

#[test]
fn equal_params_make_equal_ops_so_duplicates_can_merge() {
    let a = Op::Custom(CustomOpRef::new(Tear { dims: vec![1] }));
    let b = Op::Custom(CustomOpRef::new(Tear { dims: vec![1] }));
    let c = Op::Custom(CustomOpRef::new(Tear { dims: vec![0] }));
    assert_eq!(a, b);
    assert_ne!(a, c);
    let hash = |o: &Op| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        o.hash(&mut h);
        h.finish()
    };
    assert_eq!(hash(&a), hash(&b));
    assert_ne!(
        Op::Custom(CustomOpRef::new(Scale::new(0.0))),
        Op::Custom(CustomOpRef::new(Scale::new(-0.0)))
    );
}

#[test]
fn registered_ops_are_found_by_name_with_their_attributes() {
    register_custom_op("tear", |p: &OpParams| {
        let dims = p.get_ints("dims").ok_or("tear needs `dims`")?;
        Ok(CustomOpRef::new(Tear {
            dims: dims.iter().map(|&d| d as usize).collect(),
        }))
    });
    let op = lookup_custom_op("tear", &OpParams::new().int("dims", vec![1])).unwrap();
    assert_eq!(op, CustomOpRef::new(Tear { dims: vec![1] }));
    assert!(lookup_custom_op("tear", &OpParams::new())
        .unwrap_err()
        .contains("dims"));
    assert!(lookup_custom_op("no_such_op", &OpParams::new())
        .unwrap_err()
        .contains("no custom op"));
}

/// Asks for scratch space and a random generator, and reports what it got.
#[derive(Debug)]
struct UsesResources;

impl CustomOp for UsesResources {
    fn name(&self) -> &str {
        "uses_resources"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        let n = TensorType::fixed(kiln::f64, &[]);
        Ok(vec![n.clone(), n, inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        assert!(!ctx.requests.contains(&kiln::custom::WriteRequest::AddTo));
        outputs[0] = Some(Tensor::scalar(ctx.temp.len() as f64));
        outputs[1] = Some(Tensor::scalar(kiln::random::uniform_f64(ctx.seed, 0)));
        outputs[2] = Some(inputs[0].clone());
        Ok(())
    }
    fn resources(&self) -> Vec<kiln::custom::Resource> {
        vec![
            kiln::custom::Resource::TempSpace(4096),
            kiln::custom::Resource::Random,
        ]
    }
    fn default_output(&self) -> usize {
        2
    }
}

#[test]
fn ops_get_the_resources_they_ask_for_and_a_default_output() {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let outs = g.apply_custom(UsesResources, &[&x]);
    let main = g.apply_custom_default(UsesResources, &[&x]);
    assert_eq!(main.ty(), x.ty(), "the default output is the third");
    let f = function(&[&x], &[&outs[0], &outs[1], &main])
        .compile()
        .unwrap();
    let xv = array![1.0f32, 2.0].into_dyn();
    let a = f.call(&[xv.view()]).unwrap();
    let b = f.call(&[xv.view()]).unwrap();
    assert_eq!(vals(&a[0]), vec![4096.0]);
    assert_ne!(
        a[1], b[1],
        "the random resource gives a fresh stream per call"
    );
    assert_eq!(vals(&a[2]), vec![1.0, 2.0]);
}

/// `2 * x`, able to add its result to what its output storage holds; logs each request with
/// the address of the buffer it wrote (0 for none).
#[derive(Debug, Default)]
struct Doubler(std::sync::Arc<std::sync::Mutex<Vec<(kiln::custom::WriteRequest, usize)>>>);

impl Doubler {
    /// The requests logged so far.
    fn requests(
        log: &std::sync::Mutex<Vec<(kiln::custom::WriteRequest, usize)>>,
    ) -> Vec<kiln::custom::WriteRequest> {
        log.lock().unwrap().iter().map(|s| s.0).collect()
    }
}

impl CustomOp for Doubler {
    fn name(&self) -> &str {
        "doubler"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        use kiln::custom::WriteRequest;
        let Tensor::F64(x) = inputs[0] else {
            return Err("f64 only".into());
        };
        match (ctx.requests[0], &mut outputs[0]) {
            (WriteRequest::AddTo, Some(Tensor::F64(acc))) => {
                acc.zip_mut_with(x, |a, &v| *a += 2.0 * v)
            }
            (WriteRequest::Null, _) => {}
            (_, out) => *out = Some(Tensor::F64(x.mapv(|v| 2.0 * v))),
        }
        let at = outputs[0]
            .as_ref()
            .map_or(0, |t| t.view().as_ptr() as usize);
        self.0.lock().unwrap().push((ctx.requests[0], at));
        Ok(())
    }
    fn supports_add_to(&self) -> bool {
        true
    }
}

#[test]
fn write_requests_add_to_and_null_are_issued_where_they_apply() {
    use kiln::custom::WriteRequest;
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let seen = Doubler::default();
    let log = seen.0.clone();
    // acc is a temporary that dies in the add: the op accumulates into it.
    let acc = x.exp();
    let d = g.apply_custom(seen, &[&x]).remove(0);
    let sum = &acc + &d;
    // An output nobody reads gets Null.
    let unread = Doubler(log.clone());
    let _ = g.apply_custom(unread, &[&x]);
    // Unoptimized (the optimized case, where fusion keeps the add: the test after this one).
    let plain = kiln::CompileOptions {
        optimize: false,
        ..Default::default()
    };
    let f = function(&[&x], &[&sum])
        .options(plain.clone())
        .compile()
        .unwrap();
    let xv = array![0.0f64, 1.0, 2.0].into_dyn();
    let out = f.call(&[xv.view()]).unwrap();
    let want: Vec<f64> = xv.iter().map(|v| v.exp() + 2.0 * v).collect();
    assert_near(&vals(&out[0]), &want);
    assert_eq!(Doubler::requests(&log), vec![WriteRequest::AddTo]);
    // The unread op is not even in the function (nothing needs it); with its output returned
    // through a second function it runs with Null only when nothing reads it.
    let seen2 = Doubler::default();
    let log2 = seen2.0.clone();
    let acc2 = x.exp();
    let d2 = g.apply_custom(seen2, &[&x]).remove(0);
    let sum2 = &acc2 + &d2;
    let f2 = function(&[&x], &[&sum2, &acc2])
        .options(plain)
        .compile()
        .unwrap();
    let out2 = f2.call(&[xv.view()]).unwrap();
    assert_near(&vals(&out2[0]), &want);
    assert_eq!(
        Doubler::requests(&log2),
        vec![WriteRequest::WriteTo],
        "acc2 is still needed, so no AddTo"
    );
}

/// Two outputs, the second of which nobody reads.
#[derive(Debug, Default)]
struct TwoOut(std::sync::Arc<std::sync::Mutex<Vec<kiln::custom::WriteRequest>>>);

impl CustomOp for TwoOut {
    fn name(&self) -> &str {
        "two_out"
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        Ok(vec![inputs[0].clone(), inputs[0].clone()])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        ctx: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        self.0.lock().unwrap().extend_from_slice(ctx.requests);
        outputs[0] = Some(inputs[0].clone());
        if ctx.requests[1] != kiln::custom::WriteRequest::Null {
            outputs[1] = Some(inputs[0].clone());
        }
        Ok(())
    }
}

#[test]
fn unread_outputs_get_null() {
    use kiln::custom::WriteRequest;
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(2)]);
    let op = TwoOut::default();
    let log = op.0.clone();
    let outs = g.apply_custom(op, &[&x]);
    let f = function(&[&x], &[&outs[0]]).compile().unwrap();
    assert_eq!(
        vals(&f.call(&[array![1.0f32, 2.0].into_dyn().view()]).unwrap()[0]),
        vec![1.0, 2.0]
    );
    assert_eq!(
        *log.lock().unwrap(),
        vec![WriteRequest::WriteTo, WriteRequest::Null]
    );
}

/// `Backend::Gpu` runs custom ops as host steps of its device VM (on the host device here, as
/// on a machine without a GPU), between kernels: a hidden buffer kept between calls, scratch
/// space and a fresh random stream per call, each value the interpreter's bit for bit.
#[cfg(feature = "gpu")]
#[test]
fn custom_ops_run_as_host_steps_on_the_gpu_backend() {
    kiln::jit_ptx::cuda::use_host_device();
    let g = Graph::new();
    let a = g.input("a", kiln::f32, [None]);
    let b = g.input("b", kiln::f32, [None]);
    let op = AddWithBuffer::default();
    let allocs = op.allocations.clone();
    let s = g.try_apply_custom(op, &[&a, &b]).unwrap();
    let y = &s[0] * 3.0 + &a;
    let r = g.apply_custom(UsesResources, &[&y]);
    let outs = [&y, &r[0], &r[1], &r[2]];
    let gpu = function(&[&a, &b], &outs)
        .backend(kiln::Backend::Gpu)
        .compile()
        .unwrap();
    let reference = function(&[&a, &b], &outs)
        .backend(kiln::Backend::Interp)
        .compile()
        .unwrap();
    let mut streams = Vec::new();
    for (call, n) in [2, 2, 4, 5].into_iter().enumerate() {
        let x = ArrayD::from_shape_fn(IxDyn(&[n]), |i| i[0] as f32 + 0.5);
        let before = allocs.load(Ordering::Relaxed);
        let got = gpu.call(&[x.view(), x.view()]).unwrap();
        let grew = allocs.load(Ordering::Relaxed) - before;
        // The device VM keeps the op's buffer: made at the first call, grown only for the
        // fifth element.
        assert_eq!(grew, usize::from(call == 0 || n == 5), "{n} elements");
        let want = reference.call(&[x.view(), x.view()]).unwrap();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.bit_eq(w), "output {k} with {n} elements: {g:?} != {w:?}");
        }
        assert_eq!(vals(&got[1]), vec![4096.0]);
        streams.push(got[2].clone());
    }
    assert_ne!(streams[0], streams[1], "a fresh stream per call");
}

/// `x` repeated twice (`[x, x]`): `make_node` leaves its length open, the shape function
/// (`infer_shape`) says `2n`, or `claim` elements when given (a wrong or huge claim). It
/// records whether `perform` found its output already sized.
#[derive(Debug, Default)]
struct Twice {
    claim: Option<usize>,
    presized: std::sync::Arc<std::sync::Mutex<Vec<Option<Vec<usize>>>>>,
}

impl CustomOp for Twice {
    fn name(&self) -> &str {
        "twice"
    }
    fn params(&self) -> OpParams {
        OpParams::new().int("claim", vec![self.claim.map_or(-1, |c| c as i64)])
    }
    fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        match inputs {
            [t] if t.rank() == 1 => Ok(vec![TensorType::new(t.dtype, vec![None])]),
            _ => Err("takes one vector".into()),
        }
    }
    fn infer_shape(&self, inputs: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
        let n = inputs[0].known_shape().ok_or("needs a known shape")?[0];
        Ok(vec![vec![self.claim.unwrap_or(2 * n)]])
    }
    fn perform(
        &self,
        inputs: &[&Tensor],
        outputs: &mut [Option<Tensor>],
        _: &mut PerformContext<'_>,
    ) -> Result<(), String> {
        let seen = outputs[0].as_ref().map(|t| t.shape().to_vec());
        self.presized.lock().unwrap().push(seen);
        let x = vals(inputs[0]);
        let both: Vec<f64> = x.iter().chain(&x).copied().collect();
        let t = Tensor::F64(ArrayD::from_shape_vec(IxDyn(&[both.len()]), both).unwrap());
        outputs[0] = Some(t);
        Ok(())
    }
}

/// A shape function resolves `?` dims where the input shapes are known, sizes the outputs
/// before `perform` runs where they are not, and feeds the check that a result fits in
/// memory; one that contradicts `make_node` or `perform` is an error.
#[test]
fn infer_shape_resolves_open_dims_and_sizes_outputs_before_perform() {
    // Known input: the output's type is known when the graph is built, and what reads it
    // gets that type too.
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let y = g.apply_custom_default(Twice::default(), &[&x]);
    assert_eq!(y.ty(), TensorType::fixed(kiln::f64, &[6]));
    assert_eq!((&y + 1.0).ty(), TensorType::fixed(kiln::f64, &[6]));

    // Open input: the output has no storage before the first call; the runtime sizes it from
    // the shape function on the run-time shapes; later calls reuse the kept storage.
    for backend in [kiln::Backend::Cpu, kiln::Backend::Interp] {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [None]);
        let op = Twice::default();
        let presized = op.presized.clone();
        let y = g.apply_custom_default(op, &[&x]);
        assert_eq!(y.ty(), TensorType::new(kiln::f64, vec![None]));
        let f = function(&[&x], &[&(&y * 2.0)])
            .backend(backend)
            .compile()
            .unwrap();
        let xs = array![1.0, 2.0].into_dyn();
        let out = f.call(&[xs.view()]).unwrap();
        assert_eq!(vals(&out[0]), vec![2.0, 4.0, 2.0, 4.0]);
        f.call(&[xs.view()]).unwrap();
        // A longer input: the kept output is remade at the new size before perform.
        let out = f.call(&[array![1.0, 2.0, 3.0].into_dyn().view()]).unwrap();
        assert_eq!(vals(&out[0]), vec![2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
        let seen = presized.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![Some(vec![4]), Some(vec![4]), Some(vec![6])],
            "{backend}"
        );
    }

    // A shape function that contradicts make_node is a type error when the graph is built.
    #[derive(Debug)]
    struct Contradicts;
    impl CustomOp for Contradicts {
        fn name(&self) -> &str {
            "contradicts"
        }
        fn make_node(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
            Ok(vec![TensorType::new(inputs[0].dtype, vec![Some(2), None])])
        }
        fn infer_shape(&self, _: &[&TensorType]) -> Result<Vec<Vec<usize>>, String> {
            Ok(vec![vec![3, 3]])
        }
        fn perform(
            &self,
            _: &[&Tensor],
            _: &mut [Option<Tensor>],
            _: &mut PerformContext<'_>,
        ) -> Result<(), String> {
            Err("not run".into())
        }
    }
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let e = g
        .try_apply_custom(Contradicts, &[&x])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("infer_shape says [3, 3] where make_node says f64[2, ?]"),
        "{e}"
    );

    // A claim perform does not keep is caught where the result is stored.
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [Some(3)]);
    let lying = Twice {
        claim: Some(5),
        ..Default::default()
    };
    let y = g.apply_custom_default(lying, &[&x]);
    let f = function(&[&x], &[&y]).compile().unwrap();
    let e = f
        .call(&[array![1.0, 2.0, 3.0].into_dyn().view()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("produced f64[6]") && e.contains("f64[5]"), "{e}");

    // A result too large for memory, known from the shape function before perform runs, is an
    // error that names it, and perform is never called.
    let g = Graph::new();
    let x = g.input("x", kiln::f64, [None]);
    let huge = Twice {
        claim: Some(1 << 45),
        ..Default::default()
    };
    let presized = huge.presized.clone();
    let y = g.apply_custom_default(huge, &[&x]);
    let f = function(&[&x], &[&y]).compile().unwrap();
    let e = f
        .call(&[array![1.0].into_dyn().view()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than can be allocated"), "{e}");
    assert!(presized.lock().unwrap().is_empty());
}

/// Gradient accumulation with the optimizer on: a sum of custom-op contributions, written in
/// either order and next to elementwise work that fusion merges, runs as one buffer that each
/// op after the first adds into (`AddTo`), with no temporary per contribution.
#[test]
fn add_to_accumulates_contributions_in_either_order_through_fusion() {
    use kiln::custom::WriteRequest;
    for backend in [kiln::Backend::Cpu, kiln::Backend::Interp] {
        let g = Graph::new();
        let x = g.input("x", kiln::f64, [Some(1000)]);
        let log = Doubler::default().0;
        let inputs = [x.exp(), x.sin(), x.cos(), &x * 3.0];
        let d: Vec<kiln::Var> = inputs
            .iter()
            .map(|i| g.apply_custom(Doubler(log.clone()), &[i]).remove(0))
            .collect();
        // The accumulated value on the left, on the right, and a fusable term read by the sum.
        let s = &d[1] + &d[0];
        let s = &d[2] + &s;
        let s = &(&s + &d[3]) * 0.5;
        let f = function(&[&x], &[&s]).backend(backend).compile().unwrap();
        let xv = ndarray::Array::<f64, _>::linspace(-2.0, 2.0, 1000).into_dyn();
        for _ in 0..2 {
            log.lock().unwrap().clear();
            let out = f.call(&[xv.view()]).unwrap();
            let want: Vec<f64> = xv
                .iter()
                .map(|&v: &f64| v.exp() + v.sin() + v.cos() + 3.0 * v)
                .collect();
            // Sums of terms of both signs: a tolerance absolute where they cancel.
            let got = vals(&out[0]);
            let bad = got
                .iter()
                .zip(&want)
                .position(|(g, w)| (g - w).abs() > 1e-12 * (1.0 + w.abs()));
            assert!(
                bad.is_none(),
                "{backend}: at {bad:?}: {:?}",
                bad.map(|i| (got[i], want[i]))
            );
            let seen = log.lock().unwrap().clone();
            let requests: Vec<WriteRequest> = seen.iter().map(|s| s.0).collect();
            assert_eq!(
                requests,
                [
                    WriteRequest::WriteTo,
                    WriteRequest::AddTo,
                    WriteRequest::AddTo,
                    WriteRequest::AddTo
                ],
                "{backend}:\n{}",
                kiln::ir::text::print_func(f.func())
            );
            // One buffer takes every contribution after the first.
            assert!(seen[1..].iter().all(|s| s.1 == seen[1].1), "{seen:?}");
        }
    }
}
