//! Steady-state calls of a compiled function allocate no large buffers: the runtime runs the
//! lowered plan, hands each step's dead values (`frees`, branches included) to its buffer pool,
//! and the kernels of the next steps and calls write into those buffers; `call_into` lets the
//! caller keep the output buffers too.
//!
//! A counting global allocator sees every allocation of this test binary, so the tests run one
//! at a time behind a lock.

use kiln::{compile_func, Backend, CompileOptions, Function, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Allocations of exactly this size are counted: the size of the functions' 256x256 f32
/// values. (The GEMM library's packing workspace is its own, and a different size.)
const LARGE: usize = 256 * 256 * 4;

struct Counting;

static LARGE_ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() == LARGE {
            LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() == LARGE {
            LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size == LARGE {
            LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn compile(src: &str, backend: Backend) -> Function {
    let f = kiln::ir::text::parse("steady.kir", src).unwrap().remove(0);
    let opts = CompileOptions {
        backend: Some(backend),
        ..CompileOptions::default()
    };
    compile_func(f, &opts).unwrap()
}

fn input(seed: u64) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[256, 256]), |i| {
        kiln::random::normal_f32(seed, (i[0] * 256 + i[1]) as u64)
    })
}

/// Large allocations made by the third of three `call_into`s with the same buffers.
fn allocations_in_steady_state(f: &Function, inputs: &[ArrayD<f32>]) -> (usize, Vec<Tensor>) {
    let views: Vec<_> = inputs.iter().map(|a| a.view().into_dyn()).collect();
    let mut outs: Vec<Tensor> = f.call(&views).unwrap();
    f.call_into(&views, &mut outs).unwrap();
    let before = LARGE_ALLOCS.load(Ordering::Relaxed);
    f.call_into(&views, &mut outs).unwrap();
    (LARGE_ALLOCS.load(Ordering::Relaxed) - before, outs)
}

/// A chain of maps and a reduction whose intermediates the fuser cannot remove (the matmul
/// reads one, the broadcast division reads the row sums), and a branch with one of its own.
const CHAIN: &str = "func @f(%x: f32[256, 256], %w: f32[256, 256], %c: bool[]) -> (f32[256, 256]) {
  %t = tanh %x
  %m = matmul %t, %w
  %e = exp %m
  %s = sum %e {axes = [1], keepdims = true}
  %p = div %e, %s
  %y = ifelse %c {
    %q = matmul %p, %w
    %r = sin %q
    yield %r
  } else {
    yield %p
  }
  return %y
}";

#[test]
fn steady_calls_allocate_no_large_buffers_on_the_cpu_backend() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(CHAIN, Backend::Cpu);
    for taken in [true, false] {
        let c = ArrayD::from_elem(IxDyn(&[]), taken);
        let x = input(1);
        let w = input(2).mapv(|v| v * 0.05);
        let views = vec![
            x.view().into_dyn().into(),
            w.view().into_dyn().into(),
            kiln::TensorRef::from(c.view().into_dyn()),
        ];
        let mut outs = f.call(&views).unwrap();
        f.call_into(&views, &mut outs).unwrap();
        let before = LARGE_ALLOCS.load(Ordering::Relaxed);
        f.call_into(&views, &mut outs).unwrap();
        let allocs = LARGE_ALLOCS.load(Ordering::Relaxed) - before;
        assert_eq!(allocs, 0, "branch taken: {taken}");
        // And the values are the interpreter's.
        let want = compile(CHAIN, Backend::Interp).call(&views).unwrap();
        let (got, want) = (outs[0].as_f32().unwrap(), want[0].as_f32().unwrap());
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1e-3), "{a} vs {b}");
        }
    }
}

#[test]
fn the_counter_sees_a_function_that_allocates() {
    // The interpreter's perform allocates each result: the counter must see it, or the test
    // above proves nothing.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = compile(
        "func @g(%x: f32[256, 256]) -> (f32[256, 256]) {
           %a = tanh %x
           %b = exp %a
           %m = matmul %a, %b
           return %m
         }",
        Backend::Interp,
    );
    let (allocs, _) = allocations_in_steady_state(&f, &[input(3)]);
    assert!(allocs >= 2, "{allocs}");
}
