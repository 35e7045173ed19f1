//! What the CPU backend generates (`jit_cpu::build`). Kernels are generated in shards on
//! rayon's threads, and what comes out must not depend on how many threads there are: the same
//! `kernels` and `clif` dumps, in the plan's order, and the same values, bit for bit. And a
//! reduction whose operands the plan computes (so their layout is known) gets only the vector
//! leaf the runtime will pick.

use kiln::{compile_func, Backend, CompileOptions, Function, Tensor, TensorRef};
use ndarray::{ArrayD, IxDyn};

/// Unoptimized, so every op is its own kernel: maps of several programs, reductions over
/// rows, columns and everything, and repeated programs that share a kernel.
const MANY: &str =
    "func @many(%x: f32[8, 16], %y: f32[8, 16]) -> (f32[8, 16], f32[16], f32[], f32[8, 1]) {
  %a = add %x, %y
  %b = tanh %a
  %c = mul %b, %x
  %d = exp %c
  %e = sub %d, %y
  %f = sum %e {axes = [0]}
  %g = max %e {axes = [1], keepdims = true}
  %h = sub %e, %g
  %i = add %h, %y
  %j = sin %i
  %k = tanh %j
  %l = mul %k, %k
  %m = sum %l
  %n = sum %x {axes = [0]}
  %o = add %f, %n
  %p = min %l {axes = [1], keepdims = true}
  %q = add %p, %g
  return %l, %o, %m, %q
}";

fn compile_with(threads: usize, dir: &std::path::Path) -> Function {
    let f = kiln::ir::text::parse("many.kir", MANY).unwrap().remove(0);
    let mut dump = kiln::dump::DumpOptions::parse("kernels,clif");
    dump.dir = Some(dir.to_path_buf());
    let opts = CompileOptions {
        backend: Some(Backend::Cpu),
        optimize: false,
        dump,
        ..CompileOptions::default()
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| compile_func(f, &opts).unwrap())
}

fn values(seed: u64) -> ArrayD<f32> {
    ArrayD::from_shape_fn(IxDyn(&[8, 16]), |i| {
        kiln::random::normal_f32(seed, (i[0] * 16 + i[1]) as u64)
    })
}

#[test]
fn kernels_and_values_do_not_depend_on_the_thread_count() {
    let root = std::env::temp_dir().join(format!("kiln-shards-{}", std::process::id()));
    let (x, y) = (values(1), values(2));
    let inputs = [TensorRef::from(x.view()), TensorRef::from(y.view())];
    let mut seen: Option<(String, String, Vec<Tensor>)> = None;
    for threads in [1, 2, 3] {
        let dir = root.join(threads.to_string());
        let f = compile_with(threads, &dir);
        let read = |stage: &str| {
            let nn = kiln::dump::STAGES.iter().position(|s| *s == stage).unwrap();
            std::fs::read_to_string(dir.join(format!("many.{nn:02}.{stage}.txt"))).unwrap()
        };
        let (kernels, clif) = (read("kernels"), read("clif"));
        assert!(kernels.lines().count() >= 12, "{kernels}");
        let outs = f.call(&inputs).unwrap();
        match &seen {
            None => seen = Some((kernels, clif, outs)),
            Some((k, c, o)) => {
                assert_eq!(&kernels, k, "kernels dump with {threads} threads");
                assert_eq!(&clif, c, "clif dump with {threads} threads");
                assert_eq!(&outs, o, "values with {threads} threads");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The `clif` dump of `src` compiled for the CPU (optimizer off): its function names.
fn functions(src: &str, name: &str) -> Vec<String> {
    let f = kiln::ir::text::parse("leaves.kir", src).unwrap().remove(0);
    let dir = std::env::temp_dir().join(format!("kiln-leaves-{}-{name}", std::process::id()));
    let mut dump = kiln::dump::DumpOptions::parse("clif");
    dump.dir = Some(dir.clone());
    let opts = CompileOptions {
        backend: Some(Backend::Cpu),
        optimize: false,
        dump,
        ..CompileOptions::default()
    };
    compile_func(f, &opts).unwrap();
    let nn = kiln::dump::STAGES
        .iter()
        .position(|s| *s == "clif")
        .unwrap();
    let text = std::fs::read_to_string(dir.join(format!("{name}.{nn:02}.clif.txt"))).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    text.lines()
        .filter_map(|l| l.strip_prefix("function %"))
        .map(|l| l.split('(').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn reductions_of_computed_values_get_only_the_vector_leaf_they_use() {
    // Rows of a computed (contiguous) value: lanes along the row, no column leaf.
    let rows = functions(
        "func @rows(%x: f32[8, 16]) -> (f32[8]) {
           %e = exp %x
           %s = sum %e {axes = [1]}
           return %s
         }",
        "rows",
    );
    assert!(rows.iter().any(|f| f.ends_with("_row")), "{rows:?}");
    assert!(!rows.iter().any(|f| f.ends_with("_col")), "{rows:?}");
    // Down the columns: vectors of outputs, no row leaf.
    let cols = functions(
        "func @cols(%x: f32[8, 16]) -> (f32[16]) {
           %e = exp %x
           %s = sum %e {axes = [0]}
           return %s
         }",
        "cols",
    );
    assert!(cols.iter().any(|f| f.ends_with("_col")), "{cols:?}");
    assert!(!cols.iter().any(|f| f.ends_with("_row")), "{cols:?}");
    // A parameter may be any view (a transposed array): both.
    let param = functions(
        "func @param(%x: f32[8, 16]) -> (f32[8]) {
           %s = sum %x {axes = [1]}
           return %s
         }",
        "param",
    );
    assert!(param.iter().any(|f| f.ends_with("_row")), "{param:?}");
    assert!(param.iter().any(|f| f.ends_with("_col")), "{param:?}");
}
