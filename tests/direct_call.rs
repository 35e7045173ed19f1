//! The CPU backend's direct call (`jit_cpu::direct`): small functions made of map kernels over
//! known shapes are called without the VM. They must give the interpreter's values whatever
//! the operands (broadcast rows and columns, 0-d inputs, intermediates, several outputs, an
//! output read by a later step), replace output buffers that do not fit, fall back to the VM
//! for inputs it cannot take (strided views), and allocate nothing per call: that is what
//! tells the direct path from the VM, which allocates its bookkeeping on every call.
//!
//! A counting global allocator counts each thread's allocations. A direct call runs on the
//! calling thread, so that thread's count is what a call allocates; the threads of earlier
//! compiles (rayon's workers winding down) may still allocate while a test measures, which a
//! count over all threads saw now and then on a loaded machine. The tests also run one at a
//! time behind a lock.

use kiln::{compile_func, Backend, CompileOptions, Function, Tensor, TensorRef};
use ndarray::{ArrayD, IxDyn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;

struct Counting;

thread_local! {
    /// Allocations made by this thread (a const initializer: reading it never allocates).
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left, and its allocations are not
    // a call's.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocations_on_this_thread() -> usize {
    ALLOCS.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn compile(src: &str, backend: Backend, optimize: bool) -> Function {
    let f = kiln::ir::text::parse("direct.kir", src).unwrap().remove(0);
    let opts = CompileOptions {
        backend: Some(backend),
        optimize,
        ..CompileOptions::default()
    };
    compile_func(f, &opts).unwrap()
}

fn values(seed: u64, shape: &[usize]) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| kiln::random::normal_f32(seed, i))
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

/// Allocations made by `f.call_into` once warm.
fn allocations_per_call(f: &Function, inputs: &[TensorRef<'_>], outs: &mut [Tensor]) -> usize {
    f.call_into(inputs, outs).unwrap();
    let before = allocations_on_this_thread();
    for _ in 0..10 {
        f.call_into(inputs, outs).unwrap();
    }
    (allocations_on_this_thread() - before).div_ceil(10)
}

fn assert_same(got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.dtype(), w.dtype(), "output {k}");
        assert_eq!(g.shape(), w.shape(), "output {k}");
        match (g, w) {
            (Tensor::F32(a), Tensor::F32(b)) => {
                for (x, y) in a.iter().zip(b) {
                    let tol = 4.0 * f32::EPSILON * y.abs().max(1e-30);
                    assert!(
                        (x - y).abs() <= tol || x.to_bits() == y.to_bits(),
                        "output {k}: {x} vs {y}"
                    );
                }
            }
            _ => assert_eq!(g, w, "output {k}"),
        }
    }
}

/// W7: `x + 1` on ten floats.
const ADD_ONE: &str = "func @f(%x: f32[10]) -> (f32[10]) {
  %one = const 1.0 : f32[]
  %y = add %x, %one
  return %y
}";

/// Unfused (optimizer off), so each op is its own kernel: intermediates in scratch memory, a
/// row-broadcast and a column-broadcast operand, a 0-d input, an output (`%a`) that a later
/// step reads, and a bool output.
const CHAIN: &str = "func @g(%x: f32[3, 4], %r: f32[4], %c: f32[3, 1], %s: f32[]) -> (f32[3, 4], f32[3, 4], bool[3, 4]) {
  %a = add %x, %r
  %b = mul %a, %c
  %e = exp %b
  %t = sub %e, %s
  %d = div %t, %a
  %z = gt %d, %s
  return %a, %d, %z
}";

#[test]
fn a_small_map_call_allocates_nothing_and_gives_the_reference_values() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(ADD_ONE, Backend::Cpu, true);
    let x = values(1, &[10]);
    let inputs = [TensorRef::from(x.view())];
    let mut outs = vec![Tensor::zeros(kiln::f32, &[10])];
    assert_eq!(allocations_per_call(&f, &inputs, &mut outs), 0);
    let want = compile(ADD_ONE, Backend::Interp, true)
        .call(&inputs)
        .unwrap();
    assert_same(&outs, &want);
    assert_same(&f.call(&inputs).unwrap(), &want);
}

#[test]
fn the_counter_sees_the_vm_allocate() {
    // The interpreter's calls allocate (bookkeeping, results): the counter must see it, or the
    // test above proves nothing.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(ADD_ONE, Backend::Interp, true);
    let x = values(1, &[10]);
    let mut outs = vec![Tensor::zeros(kiln::f32, &[10])];
    assert!(allocations_per_call(&f, &[TensorRef::from(x.view())], &mut outs) > 0);
}

#[test]
fn an_unfused_chain_with_broadcasts_and_several_outputs_matches_the_interpreter() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(CHAIN, Backend::Cpu, false);
    let reference = compile(CHAIN, Backend::Interp, false);
    let (x, r, c) = (values(2, &[3, 4]), values(3, &[4]), values(4, &[3, 1]));
    let s = ArrayD::from_elem(IxDyn(&[]), 0.25f32);
    let inputs = [
        TensorRef::from(x.view()),
        TensorRef::from(r.view()),
        TensorRef::from(c.view()),
        TensorRef::from(s.view()),
    ];
    let want = reference.call(&inputs).unwrap();
    // Buffers of the wrong shape and dtype are replaced, then reused without allocating.
    let mut outs = vec![
        Tensor::zeros(kiln::f32, &[2]),
        Tensor::zeros(kiln::f64, &[3, 4]),
        Tensor::zeros(kiln::f32, &[3, 4]),
    ];
    f.call_into(&inputs, &mut outs).unwrap();
    assert_same(&outs, &want);
    assert_eq!(allocations_per_call(&f, &inputs, &mut outs), 0);
    assert_same(&outs, &want);
    assert_same(&f.call(&inputs).unwrap(), &want);
}

#[test]
fn a_strided_input_goes_through_the_vm_with_the_same_values() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(CHAIN, Backend::Cpu, false);
    let reference = compile(CHAIN, Backend::Interp, false);
    // Every other column of a 3x8 array: a 3x4 view that is not contiguous.
    let wide = values(5, &[3, 8]);
    let x = wide.slice(ndarray::s![.., ..;2]).into_dyn();
    let (r, c) = (values(6, &[4]), values(7, &[3, 1]));
    let s = ArrayD::from_elem(IxDyn(&[]), -0.5f32);
    let inputs = [
        TensorRef::from(x),
        TensorRef::from(r.view()),
        TensorRef::from(c.view()),
        TensorRef::from(s.view()),
    ];
    assert!(!inputs[0].is_standard_layout());
    let want = reference.call(&inputs).unwrap();
    let mut outs = f.call(&inputs).unwrap();
    assert_same(&outs, &want);
    assert!(
        allocations_per_call(&f, &inputs, &mut outs) > 0,
        "the VM ran"
    );
    assert_same(&outs, &want);
}

#[test]
fn calls_from_several_threads_at_once_agree() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // One thread holds the scratch memory while others call: they take the VM.
    let f = compile(CHAIN, Backend::Cpu, false);
    let reference = compile(CHAIN, Backend::Interp, false);
    let (x, r, c) = (values(8, &[3, 4]), values(9, &[4]), values(10, &[3, 1]));
    let s = ArrayD::from_elem(IxDyn(&[]), 0.0f32);
    let inputs = [
        TensorRef::from(x.view()),
        TensorRef::from(r.view()),
        TensorRef::from(c.view()),
        TensorRef::from(s.view()),
    ];
    let want = reference.call(&inputs).unwrap();
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                let mut outs = f.call(&inputs).unwrap();
                for _ in 0..500 {
                    f.call_into(&inputs, &mut outs).unwrap();
                    assert_same(&outs, &want);
                }
            });
        }
    });
}
