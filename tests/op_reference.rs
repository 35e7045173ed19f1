//! The op table of `docs/reference/ops.md`, made from the op set: each op's text form, the
//! dtypes type inference accepts, whether `kiln::grad` goes through it, and how the CPU
//! backend runs it are probed here, and what no probe can tell (the Rust API and a line on
//! what the op computes) comes from `documented`, a `match` on every `Op` that stops
//! compiling when an op is added without docs. The test fails when the table in the docs is
//! not the one made here; `KILN_BLESS=1 cargo test --test op_reference` writes it.

use kiln::ir::text::{inst_attrs, op_head, parse_one, parse_op};
use kiln::ir::{infer, BinaryOp, DType, Op, ReduceOp, TensorType, UnaryOp};
use kiln::lower::{lower_with, Kernel, LowerOptions};

const DTYPES: [&str; 7] = ["bool", "i32", "i64", "f32", "f64", "f16", "bf16"];

/// The dtypes in the order an example is shown and run in: the first that fits.
const SHOWN: [&str; 7] = ["f32", "f64", "i64", "i32", "bool", "f16", "bf16"];

/// One op's example: its name (with the string of `custom "NAME"`-like ops), attributes and
/// argument types, where `T` stands for the dtype being probed.
struct Example {
    name: String,
    attrs: &'static str,
    args: Vec<&'static str>,
}

fn ex(name: &str, attrs: &'static str, args: &[&'static str]) -> Example {
    Example {
        name: name.to_string(),
        attrs,
        args: args.to_vec(),
    }
}

/// Every op the text form writes as one instruction without a region, with arguments of
/// the shapes it takes. The ops with regions, constants and the optimizer's own ops are
/// described in `documented` and `special_rows`.
fn examples() -> Vec<Example> {
    let mut v = Vec::new();
    for u in UnaryOp::ALL {
        v.push(ex(u.name(), "", &["T[2, 3]"]));
    }
    for b in BinaryOp::ALL {
        v.push(ex(b.name(), "", &["T[2, 3]", "T[2, 3]"]));
    }
    for r in ReduceOp::ALL {
        v.push(ex(r.name(), "{axes = [1]}", &["T[2, 3]"]));
    }
    v.extend([
        ex("select", "", &["bool[2, 3]", "T[2, 3]", "T[2, 3]"]),
        ex("cast", "{to = f64}", &["T[2, 3]"]),
        ex("transpose", "{perm = [1, 0]}", &["T[2, 3]"]),
        ex("reshape", "{shape = [-1]}", &["T[2, 3]"]),
        ex("broadcast_to", "{shape = [2, 3]}", &["T[1, 3]"]),
        ex("expand_dims", "{axes = [0]}", &["T[2, 3]"]),
        ex("squeeze", "{axes = [0]}", &["T[1, 3]"]),
        ex("concat", "{axis = 0}", &["T[2, 3]", "T[2, 3]"]),
        ex(
            "slice",
            "{starts = [1], stops = [3], steps = [1]}",
            &["T[4, 3]"],
        ),
        ex("take", "{axis = 0}", &["T[4, 3]", "i64[2]"]),
        ex("take_along_axis", "{axis = 1}", &["T[2, 3]", "i64[2, 3]"]),
        ex(
            "scatter_add",
            "{axis = 0}",
            &["T[4, 3]", "i64[2]", "T[2, 3]"],
        ),
        ex(
            "scatter_set",
            "{axis = 0}",
            &["T[4, 3]", "i64[2]", "T[2, 3]"],
        ),
        ex("one_hot", "{depth = 4, dtype = f32}", &["T[3]"]),
        ex("cumsum", "{axis = 1}", &["T[2, 3]"]),
        ex("cumprod", "{axis = 1}", &["T[2, 3]"]),
        ex("cumprod_grad", "{axis = 1}", &["T[2, 3]", "T[2, 3]"]),
        ex("sort", "{axis = 1}", &["T[2, 3]"]),
        ex("argsort", "{axis = 1}", &["T[2, 3]"]),
        ex("matmul", "", &["T[2, 3]", "T[3, 4]"]),
        ex("conv2d", "", &["T[1, 1, 4, 4]", "T[1, 1, 3, 3]"]),
        ex(
            "conv2d_grad_image",
            "{image = [4, 4]}",
            &["T[1, 1, 2, 2]", "T[1, 1, 3, 3]"],
        ),
        ex(
            "conv2d_grad_filter",
            "{kernel = [3, 3]}",
            &["T[1, 1, 4, 4]", "T[1, 1, 2, 2]"],
        ),
        ex("max_pool2d", "{window = [2, 2]}", &["T[1, 1, 4, 4]"]),
        ex("avg_pool2d", "{window = [2, 2]}", &["T[1, 1, 4, 4]"]),
        ex(
            "max_pool2d_grad",
            "{window = [2, 2], strides = [2, 2]}",
            &["T[1, 1, 4, 4]", "T[1, 1, 2, 2]"],
        ),
        ex(
            "avg_pool2d_grad",
            "{window = [2, 2], strides = [2, 2]}",
            &["T[1, 1, 4, 4]", "T[1, 1, 2, 2]"],
        ),
        ex("zeros", "{shape = [2, 3], dtype = T}", &[]),
        ex("ones", "{shape = [2, 3], dtype = T}", &[]),
        ex("full", "{shape = [2, 3], dtype = T, value = 1.0}", &[]),
        ex(
            "arange",
            "{start = 0.0, stop = 3.0, step = 1.0, dtype = T}",
            &[],
        ),
        ex(
            "uniform",
            "{seed = 1, shape = [2, 3], dtype = T, low = 0.0, high = 1.0}",
            &[],
        ),
        ex(
            "normal",
            "{seed = 1, shape = [2, 3], dtype = T, mean = 0.0, std = 1.0}",
            &[],
        ),
        ex(
            "bernoulli",
            "{seed = 1, shape = [2, 3], dtype = T, p = 0.5}",
            &[],
        ),
    ]);
    v
}

/// What only a person can say about an op: the Rust API that builds it and what it
/// computes. Every `Op` is matched (no `_` arm), so adding an op to the IR stops this test
/// from compiling until it is described here.
fn documented(op: &Op) -> (&'static str, &'static str) {
    match op {
        Op::Unary(u) => unary_doc(*u),
        Op::Binary(b) => binary_doc(*b),
        Op::Reduce { op, .. } => reduce_doc(*op),
        Op::Select => ("`Var::select(&then, &otherwise)` on a bool condition", "numpy `where`, broadcasting all three"),
        Op::Cast { .. } => ("`Var::cast(dtype)`", "converts; floats to integers truncate and saturate, NaN to 0"),
        Op::Transpose { .. } => ("`Var::transpose(&perm)`, `Var::t()`", "permutes axes (a view)"),
        Op::Reshape { .. } => ("`Var::reshape(&shape)`", "the same elements in another shape; one `-1`"),
        Op::BroadcastTo { .. } => ("`Var::broadcast_to(&shape)`", "stretches dims of extent 1 (a view)"),
        Op::ExpandDims { .. } => ("`Var::expand_dims(&axes)`", "inserts dims of extent 1"),
        Op::Squeeze { .. } => ("`Var::squeeze(&axes)`", "removes dims of extent 1"),
        Op::Concat { .. } => ("`kiln::concat(&vars, axis)`", "joins along an axis"),
        Op::Slice { .. } => ("`Var::slice(starts, stops, steps)`", "numpy basic slicing: negative indices, clamping, negative steps"),
        Op::Take { .. } => ("`Var::take(&indices, axis)`", "numpy `take`: whole slices at integer indices (negative count from the end; out of range is an error)"),
        Op::TakeAlongAxis { .. } => ("`Var::take_along_axis(&indices, axis)`", "numpy `take_along_axis`"),
        Op::ScatterAdd { .. } => ("`Var::scatter_add(&indices, &updates, axis)`", "adds updates into the slices at the indices (repeats add up); the gradient of `take`"),
        Op::ScatterSet { .. } => ("`Var::scatter_set(&indices, &updates, axis)`", "writes updates into the slices at the indices (the last of repeats wins)"),
        Op::OneHot { .. } => ("`Var::one_hot(depth, dtype)`", "a new last axis, 1 at each index"),
        Op::Cumsum { .. } => ("`Var::cumsum(axis)`", "running sums along an axis"),
        Op::Cumprod { .. } => ("`Var::cumprod(axis)`", "running products along an axis"),
        Op::CumprodGrad { .. } => ("made by `kiln::grad` of `cumprod`", "the gradient of `cumprod` (without dividing by the input, so zeros are exact)"),
        Op::Sort { .. } => ("`Var::sort(axis)`, `Var::sort_descending(axis)`", "sorts along an axis (numpy's stable order; NaN after every number)"),
        Op::Argsort { .. } => ("`Var::argsort(axis)`, `Var::argsort_descending(axis)`", "the stable sorting order's indices (i64)"),
        Op::MatMul => ("`Var::matmul(&other)`", "numpy `matmul`: 1-D and batched operands, batch dims broadcast"),
        Op::Conv2d(_) => ("`Var::conv2d(&filters, Conv2d { .. })`", "2-D convolution (cross-correlation) of NCHW images by OIHW filters: strides, padding, dilation, groups"),
        Op::Conv2dGradImage { .. } => ("made by `kiln::grad` of `conv2d`", "the gradient of `conv2d` with respect to the image"),
        Op::Conv2dGradFilter { .. } => ("made by `kiln::grad` of `conv2d`", "the gradient of `conv2d` with respect to the filters"),
        Op::Pool2d(_) => ("`Var::max_pool2d(..)`, `Var::avg_pool2d(..)`", "2-D pooling of NCHW images: window, strides, padding"),
        Op::Pool2dGrad(_) => ("made by `kiln::grad` of the pooling", "the gradient of `max_pool2d` or `avg_pool2d`"),
        Op::Const(_) => ("`Graph::constant(value)`, numbers next to a `Var`", "a literal array"),
        Op::Zeros { .. } => ("`Graph::zeros(dtype, &shape)`", "an array of zeros"),
        Op::Ones { .. } => ("`Graph::ones(dtype, &shape)`", "an array of ones"),
        Op::Full { .. } => ("`Graph::full(dtype, &shape, value)`", "an array of one value"),
        Op::Arange { .. } => ("`Graph::arange(start, stop, step, dtype)`", "numpy `arange`"),
        Op::Random { .. } => ("`Graph::uniform`, `Graph::normal`, `Graph::bernoulli`, `Graph::random`", "draws from the seed's Philox stream (see semantics.md); with a counter, a new stream per call"),
        Op::IfElse => ("`kiln::ifelse(&cond, then, otherwise)`", "computes only the branch its bool scalar picks"),
        Op::Scan { .. } => ("`kiln::scan(..)`, `kiln::scan_reverse(..)`", "loops a body over the leading axis of sequences, with carries (text form: see text-form.md)"),
        Op::Composite { .. } => ("made by the optimizer's fusion", "an elementwise scalar program, one kernel"),
        Op::FusedReduce { .. } => ("made by the optimizer's fusion", "a reduction of an elementwise scalar program, one kernel"),
        Op::Custom(_) => CUSTOM,
    }
}

/// A user's op (`Op::Custom`).
const CUSTOM: (&str, &str) = (
    "`Graph::apply_custom` with a `kiln::custom` op",
    "a user's op: its own `perform`, shapes, gradient and in-place maps",
);

fn unary_doc(u: UnaryOp) -> (&'static str, &'static str) {
    use UnaryOp::*;
    let what = match u {
        Neg => return ("`-x`", "negation"),
        Not => return ("`Var::logical_not()`", "logical not (bool)"),
        Abs => "absolute value",
        Sign => "-1, 0 or 1 (NaN stays NaN)",
        Exp => "e^x",
        Log => "natural logarithm",
        Log1p => "log(1 + x), accurate near 0",
        Expm1 => "e^x - 1, accurate near 0",
        Sqrt => "square root (correctly rounded)",
        Rsqrt => "1 / sqrt(x)",
        Sin => "sine",
        Cos => "cosine",
        Tan => "tangent",
        Tanh => "hyperbolic tangent",
        Sigmoid => "1 / (1 + e^-x)",
        Erf => "the error function",
        Floor => "rounds down",
        Ceil => "rounds up",
        Round => "rounds half to even",
        Square => "x * x",
        Reciprocal => "1 / x",
        Relu => "max(x, 0)",
    };
    (unary_method(u), what)
}

/// The `Var` method of a unary op: its text name.
fn unary_method(u: UnaryOp) -> &'static str {
    use UnaryOp::*;
    match u {
        Exp => "`Var::exp()`",
        Log => "`Var::log()`",
        Log1p => "`Var::log1p()`",
        Expm1 => "`Var::expm1()`",
        Sqrt => "`Var::sqrt()`",
        Rsqrt => "`Var::rsqrt()`",
        Sin => "`Var::sin()`",
        Cos => "`Var::cos()`",
        Tan => "`Var::tan()`",
        Tanh => "`Var::tanh()`",
        Sigmoid => "`Var::sigmoid()`",
        Erf => "`Var::erf()`",
        Abs => "`Var::abs()`",
        Sign => "`Var::sign()`",
        Floor => "`Var::floor()`",
        Ceil => "`Var::ceil()`",
        Round => "`Var::round()`",
        Square => "`Var::square()`",
        Reciprocal => "`Var::reciprocal()`",
        Relu => "`Var::relu()`",
        Neg => "`-x`",
        Not => "`Var::logical_not()`",
    }
}

fn binary_doc(b: BinaryOp) -> (&'static str, &'static str) {
    use BinaryOp::*;
    match b {
        Add => ("`a + b`", "addition"),
        Sub => ("`a - b`", "subtraction"),
        Mul => ("`a * b`", "multiplication"),
        Div => ("`a / b`", "true division (floats)"),
        FloorDiv => (
            "`Var::floordiv(b)`",
            "numpy `floor_divide`; an integer by 0 gives 0",
        ),
        Mod => (
            "`a % b`, `Var::modulo(b)`",
            "numpy's remainder, the divisor's sign; an integer by 0 gives 0",
        ),
        Pow => ("`Var::pow(b)`", "numpy `power`"),
        Maximum => ("`Var::maximum(b)`", "the larger, NaN propagating"),
        Minimum => ("`Var::minimum(b)`", "the smaller, NaN propagating"),
        Lt => ("`Var::lt(b)`", "a < b (bool)"),
        Le => ("`Var::le(b)`", "a <= b (bool)"),
        Gt => ("`Var::gt(b)`", "a > b (bool)"),
        Ge => ("`Var::ge(b)`", "a >= b (bool)"),
        Eq => ("`Var::eq(b)`", "a == b (bool)"),
        Ne => ("`Var::ne(b)`", "a != b (bool)"),
        And => ("`Var::and(b)`", "logical and (bool)"),
        Or => ("`Var::or(b)`", "logical or (bool)"),
    }
}

fn reduce_doc(r: ReduceOp) -> (&'static str, &'static str) {
    use ReduceOp::*;
    match r {
        Sum => (
            "`Var::sum(axes, keepdims)`",
            "sum (pairwise for floats; bool sums to i64)",
        ),
        Prod => ("`Var::prod(axes, keepdims)`", "product"),
        Max => (
            "`Var::max(axes, keepdims)`",
            "largest, NaN propagating; empty is an error",
        ),
        Min => (
            "`Var::min(axes, keepdims)`",
            "smallest, NaN propagating; empty is an error",
        ),
        Mean => ("`Var::mean(axes, keepdims)`", "mean (integers give f64)"),
        ArgMax => (
            "`Var::argmax(axis, keepdims)`",
            "index of the first largest (NaN counts as largest), i64",
        ),
        ArgMin => (
            "`Var::argmin(axis, keepdims)`",
            "index of the first smallest, i64",
        ),
        All => ("`Var::all(axes, keepdims)`", "logical and"),
        Any => ("`Var::any(axes, keepdims)`", "logical or"),
    }
}

/// The ops the examples cannot probe (constants, regions, the optimizer's and users' ops):
/// (name, text form, dtypes, gradient, CPU backend). Their Rust API and meaning still come
/// from `documented`, through the op each stands for.
fn special_rows() -> Vec<(
    Op,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
)> {
    let op = |src: &str| parse_one("special.kir", src).unwrap().body[0].op.clone();
    vec![
        (
            op("func @f() -> (f32[2]) {\n  %c = const [1.0, 2.0] : f32[2]\n  return %c\n}\n"),
            "const",
            "`%c = const [1.0, 2.0] : f32[2]`",
            "all",
            "none needed",
            "a constant",
        ),
        (
            op("func @f(%c: bool[], %x: f32[2]) -> (f32[2]) {\n  %r = ifelse %c {\n    yield %x\n  } else {\n    yield %x\n  }\n  return %r\n}\n"),
            "ifelse",
            "`%r = ifelse %c { ... yield %a } else { ... yield %b }`",
            "all",
            "yes (through the taken branch)",
            "a branch; only the taken side runs",
        ),
        (
            op("func @f(%h: f32[2], %xs: f32[3, 2]) -> (f32[2], f32[3, 2]) {\n  %a, %b = scan %h, %xs {carries = 1} (%c: f32[2], %x: f32[2]) {\n    %n = add %c, %x\n    yield %n, %n\n  }\n  return %a, %b\n}\n"),
            "scan",
            "`%h, %ys = scan %h0, %xs {carries = 1} (%c: T, %x: T) { ... yield %n, %y }`",
            "all",
            "yes",
            "a loop; the body's steps run compiled",
        ),
        (
            op("func @f(%x: f32[2]) -> (f32[2]) {\n  %y = composite \"fused\" %x {program = \"%0 = input 0 : f32; %1 = exp %0 : f32; return %1\"}\n  return %y\n}\n"),
            "composite",
            "`composite \"fused\" %a, %b {program = \"...\"}`",
            "the program's",
            "not needed (made after gradients)",
            "kernel",
        ),
        (
            op("func @f(%x: f32[2, 3]) -> (f32[2]) {\n  %y = fused_reduce \"sum\" %x {axes = [1], program = \"%0 = input 0 : f32; %1 = exp %0 : f32; return %1\"}\n  return %y\n}\n"),
            "fused_reduce",
            "`fused_reduce \"sum\" %a {axes = [1], program = \"...\"}`",
            "the program's",
            "not needed (made after gradients)",
            "kernel",
        ),
    ]
}

/// `T` replaced by `dtype` in a type or attribute text.
fn with(text: &str, dtype: &str) -> String {
    text.replace('T', dtype)
}

fn parse_type(text: &str) -> TensorType {
    let src = format!("func @f(%a: {text}) -> ({text}) {{\n  return %a\n}}\n");
    let f = parse_one("type.kir", &src).unwrap_or_else(|e| panic!("{text}: {e}"));
    f.ty(f.params[0]).clone()
}

/// The example's op for `dtype`, and its result types, where type inference takes it.
fn instance(e: &Example, dtype: &str) -> Option<(Op, Vec<TensorType>, Vec<TensorType>)> {
    let args: Vec<TensorType> = e.args.iter().map(|a| parse_type(&with(a, dtype))).collect();
    let attrs = with(e.attrs, dtype);
    let op = parse_op(&e.name, None, &attrs, &args).ok()?;
    let refs: Vec<&TensorType> = args.iter().collect();
    let results = infer(&op, &refs).ok()?;
    Some((op, args, results))
}

/// The function `%r = op(args)` (then, with `cost`, summed to an f64 scalar) as text.
fn func_text(op: &Op, args: &[TensorType], results: &[TensorType], cost: bool) -> String {
    let params: Vec<String> = (args.iter().enumerate())
        .map(|(i, t)| format!("%a{i}: {t}"))
        .collect();
    let names: Vec<String> = (0..args.len()).map(|i| format!("%a{i}")).collect();
    let sep = if names.is_empty() { "" } else { " " };
    let call = format!(
        "{}{sep}{}{}",
        op_head(op),
        names.join(", "),
        inst_attrs(op, None)
    );
    let ret: Vec<String> = results.iter().map(|t| t.to_string()).collect();
    if !cost {
        return format!(
            "func @f({}) -> ({}) {{\n  %r = {call}\n  return %r\n}}\n",
            params.join(", "),
            ret.join(", ")
        );
    }
    format!(
        "func @f({}) -> (f64[]) {{\n  %r = {call}\n  %c = cast %r {{to = f64}}\n  %s = sum %c\n  return %s\n}}\n",
        params.join(", ")
    )
}

/// Whether `kiln::grad` differentiates the f64 instance with respect to its f64 arguments.
fn gradient(e: &Example) -> &'static str {
    let Some((op, args, results)) = instance(e, "f64") else {
        return "no float form";
    };
    let wrt: Vec<String> = (args.iter().enumerate())
        .filter(|(_, t)| t.dtype == DType::F64)
        .map(|(i, _)| format!("a{i}"))
        .collect();
    if wrt.is_empty() {
        return "none needed";
    }
    if results.len() != 1 || results[0].dtype == DType::Bool {
        return "none (bool result)";
    }
    let f = parse_one("grad.kir", &func_text(&op, &args, &results, true)).unwrap();
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    match kiln::grad::grad_func(&f, 0, &wrt) {
        Ok(_) => "yes",
        Err(_) => "no",
    }
}

/// How the CPU backend runs the op: which step it becomes in the plan.
fn cpu_step(e: &Example) -> &'static str {
    let instance = SHOWN.iter().find_map(|d| instance(e, d));
    let Some((op, args, results)) = instance else {
        return "?";
    };
    let f = parse_one("cpu.kir", &func_text(&op, &args, &results, false)).unwrap();
    let plan = lower_with(&f, LowerOptions::all());
    let kinds: Vec<&'static str> = (plan.all_steps().into_iter())
        .map(|s| match s.kernel {
            Kernel::Map { .. } | Kernel::Reduce { .. } => "kernel",
            Kernel::Gemm { .. } => "kiln GEMM",
            Kernel::View(_) => "view (no copy)",
            Kernel::Perform => "the op's `perform`",
            Kernel::IfElse { .. } => "branch",
            Kernel::Scan { .. } => "loop",
            Kernel::Rows { .. } => "row group",
        })
        .collect();
    kinds.first().copied().unwrap_or("folded away")
}

/// The table, one row per op.
fn table() -> String {
    let mut out = String::from(
        "| op | text form | Rust | dtypes | gradient | CPU backend | computes |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let row = |out: &mut String, cells: [&str; 7]| {
        out.push_str(&format!("| {} |\n", cells.join(" | ").replace('\n', " ")));
    };
    for e in examples() {
        let dtypes: Vec<&str> = DTYPES
            .iter()
            .copied()
            .filter(|d| instance(&e, d).is_some())
            .collect();
        let (op, args, _) = SHOWN
            .iter()
            .find_map(|d| instance(&e, d))
            .unwrap_or_else(|| panic!("`{}`: no dtype fits its example", e.name));
        let names: Vec<String> = (0..args.len()).map(|i| format!("%a{i}")).collect();
        let sep = if names.is_empty() { "" } else { " " };
        let text = format!(
            "`{}{sep}{}{}`",
            op_head(&op),
            names.join(", "),
            inst_attrs(&op, None)
        );
        let (rust, what) = documented(&op);
        row(
            &mut out,
            [
                &format!("`{}`", e.name),
                &text,
                rust,
                &dtypes.join(" "),
                gradient(&e),
                cpu_step(&e),
                what,
            ],
        );
    }
    for (op, name, text, dtypes, grad, cpu) in special_rows() {
        let (rust, what) = documented(&op);
        row(
            &mut out,
            [&format!("`{name}`"), text, rust, dtypes, grad, cpu, what],
        );
    }
    // A custom op exists only once a program registers one; its row says what every one has.
    row(
        &mut out,
        [
            "`custom`",
            "`custom \"NAME\" %a, %b {attrs}`",
            CUSTOM.0,
            "the op's",
            "the op's `grad`, where it has one",
            "the op's `perform`",
            CUSTOM.1,
        ],
    );
    out
}

const BEGIN: &str = "<!-- op table: made by tests/op_reference.rs -->\n";
const END: &str = "<!-- end of the op table -->\n";

#[test]
fn the_op_table_in_the_docs_is_the_one_the_op_set_makes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/ops.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let made = table();
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{} lacks the op table's markers", path.display());
    };
    let current = &doc[a + BEGIN.len()..b];
    if current == made {
        return;
    }
    if std::env::var("KILN_BLESS").is_ok_and(|v| v == "1") {
        let new = format!("{}{BEGIN}{made}{}", &doc[..a], &doc[b..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    panic!(
        "docs/reference/ops.md's op table is not the one the op set makes (an op added, \
         removed or changed): rerun with KILN_BLESS=1 to write it, and check the diff.\n\
         made:\n{made}"
    );
}

/// The table covers every op the IR has: each example's op and each special row's are
/// distinct ops, and every unary, binary and reduce op is there.
#[test]
fn every_op_has_a_row() {
    let t = table();
    for name in (UnaryOp::ALL.iter().map(|u| u.name()))
        .chain(BinaryOp::ALL.iter().map(|b| b.name()))
        .chain(ReduceOp::ALL.iter().map(|r| r.name()))
    {
        assert!(t.contains(&format!("| `{name}` |")), "no row for `{name}`");
    }
    assert!(t.lines().count() > 80, "{t}");
}
