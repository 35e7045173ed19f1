//! The C header that goes with an ahead-of-time object: the entry point's prototype, each
//! argument's dtype and shape, the scratch size, and how to link.

use super::plan::Arg;
use crate::ir::DType;
use std::fmt::Write as _;

/// The C element type of a dtype (bools are one byte holding 0 or 1).
pub fn c_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "uint8_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F32 => "float",
        DType::F64 => "double",
        // The bits: C has no portable 16-bit float type (`_Float16` is optional).
        DType::F16 | DType::BF16 => "uint16_t",
    }
}

const C_KEYWORDS: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "namespace",
    "new",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "throw",
    "true",
    "try",
    "typedef",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "while",
];

/// `s` as a C identifier: other characters become `_`, a leading digit gets a `_` before it,
/// and a keyword gets a `_` after it.
pub fn c_ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if C_KEYWORDS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// What the header says about the object.
pub struct HeaderInfo<'a> {
    pub symbol: &'a str,
    pub func_name: &'a str,
    pub triple: &'a str,
    pub cpu: &'a str,
    pub inputs: &'a [Arg],
    pub outputs: &'a [Arg],
    /// A note per input (say, "the current value of the shared variable w").
    pub input_notes: &'a [String],
    /// A note per output (say, "the new value of shared variable w").
    pub output_notes: &'a [String],
    pub scratch_bytes: usize,
    pub imports: &'a [String],
    /// Symbols from kiln's runtime library (`AotOptions::runtime`).
    pub runtime: &'a [String],
    /// What each nonzero return code means (code `i + 1` is `errors[i]`).
    pub errors: &'a [String],
}

fn shape_text(shape: &[usize]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The prototype, e.g. `int32_t f(const float *x, float *out0, void *scratch)`.
pub fn prototype(h: &HeaderInfo) -> String {
    let mut params: Vec<String> = Vec::new();
    for a in h.inputs {
        params.push(format!("const {} *{}", c_type(a.dtype), a.name));
    }
    for a in h.outputs {
        params.push(format!("{} *{}", c_type(a.dtype), a.name));
    }
    if h.scratch_bytes > 0 {
        params.push("void *scratch".into());
    }
    if params.is_empty() {
        params.push("void".into());
    }
    format!("int32_t {}({})", h.symbol, params.join(", "))
}

pub fn header(h: &HeaderInfo) -> String {
    let upper = h.symbol.to_uppercase();
    let guard = format!("KILN_AOT_{upper}_H");
    let mut s = String::new();
    let libm = if h.imports.is_empty() {
        "nothing else (the object needs no library; -lm does no harm)".to_string()
    } else {
        format!("the C math library, -lm (for {})", h.imports.join(", "))
    };
    // With kiln's runtime library: where to get it, the libraries a Rust static library needs
    // (`--print native-static-libs`), and that it allocates.
    let (link, alloc) = if h.runtime.is_empty() {
        (
            format!(
                " * Link the object file with {libm}:\n *     cc main.c {}.o -lm -o main",
                h.symbol
            ),
            "allocates nothing, keeps no state between\n * calls",
        )
    } else {
        (
            format!(
                " * Link the object file with kiln's runtime library libkiln_rt.a (for {}; built by\n * `cargo build --release -p kiln-rt` in kiln's repository, as target/release/libkiln_rt.a)\n * and the libraries it needs, and with {libm}:\n *     cc main.c {}.o libkiln_rt.a -lm -lpthread -ldl -o main",
                h.runtime.join(", "),
                h.symbol
            ),
            "allocates nothing but what kiln's runtime library\n * keeps for its matrix products (packing buffers, made on first use and reused), keeps no\n * state between calls",
        )
    };
    let _ = writeln!(
        s,
        "/* {sym}.h: the entry point of @{f}, compiled ahead of time by kiln. Generated; do not edit.
 *
 * Target: {triple}; the code needs {cpu}.
{link}
 *
 * {proto};
 *
 * Every array is dense and row-major (C order) with the dtype and shape listed below, aligned
 * to its element size at least; bool elements are uint8_t holding 0 or 1. Inputs are only
 * read. Every element of every output is written; output arrays must not overlap each other,
 * the inputs or the scratch area. The function {alloc} and runs on the calling thread: calls from several threads at once are safe when each
 * has its own outputs and scratch area.
 *
 * It returns 0, or a failure code when an input cannot be computed on (an index out of range):
 * the outputs then hold nothing meaningful. {sym}_error(code) says what a code means.{codes}",
        sym = h.symbol,
        f = h.func_name,
        triple = h.triple,
        cpu = h.cpu,
        proto = prototype(h),
        codes = if h.errors.is_empty() {
            " This\n * function has no failure codes: it always returns 0.".to_string()
        } else {
            h.errors
                .iter()
                .enumerate()
                .map(|(i, e)| format!("\n *   {}: {}", i + 1, comment_safe(e)))
                .collect()
        },
    );
    if h.scratch_bytes > 0 {
        let _ = writeln!(
            s,
            " *
 * scratch: a caller-provided area of {sym}_scratch_bytes ({n}) bytes for intermediate values,
 * aligned to {upper}_SCRATCH_ALIGN (64) bytes, e.g. aligned_alloc(64, {sym}_scratch_bytes). Its
 * contents need no initialization and mean nothing afterwards.",
            sym = h.symbol,
            n = h.scratch_bytes,
        );
    } else {
        let _ = writeln!(
            s,
            " *
 * This function needs no scratch area ({sym}_scratch_bytes is 0).",
            sym = h.symbol
        );
    }
    s.push_str(" *\n");
    let note = |notes: &[String], i: usize| {
        notes
            .get(i)
            .filter(|t| !t.is_empty())
            .map(|t| format!(": {t}"))
            .unwrap_or_default()
    };
    for (i, a) in h.inputs.iter().enumerate() {
        let n: usize = a.shape.iter().product();
        let note = note(h.input_notes, i);
        let _ = writeln!(
            s,
            " * input  {i}: {name}: {dt}{sh} ({ct}, {}){note}",
            elements(n),
            name = a.name,
            dt = a.dtype,
            sh = shape_text(&a.shape),
            ct = c_type(a.dtype),
        );
    }
    for (i, a) in h.outputs.iter().enumerate() {
        let n: usize = a.shape.iter().product();
        let note = note(h.output_notes, i);
        let _ = writeln!(
            s,
            " * output {i}: {name}: {dt}{sh} ({ct}, {}){note}",
            elements(n),
            name = a.name,
            dt = a.dtype,
            sh = shape_text(&a.shape),
            ct = c_type(a.dtype),
        );
    }
    let _ = writeln!(
        s,
        " */
#ifndef {guard}
#define {guard}

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern \"C\" {{
#endif
"
    );
    let _ = writeln!(
        s,
        "#define {upper}_SCRATCH_BYTES ((size_t){n})\n#define {upper}_SCRATCH_ALIGN ((size_t)64)\nstatic const size_t {sym}_scratch_bytes = {upper}_SCRATCH_BYTES;\n",
        n = h.scratch_bytes,
        sym = h.symbol
    );
    let indexed = (h.inputs.iter().enumerate()).chain(h.outputs.iter().enumerate());
    for (index, a) in indexed {
        let name = a.name.to_uppercase();
        let n: usize = a.shape.iter().product();
        let _ = writeln!(
            s,
            "/* {}: {}{} */\n#define {upper}_{name}_ELEMS ((size_t){n})\n#define {upper}_{name}_RANK {}\n#define {upper}_{name}_INDEX {index}",
            a.name,
            a.dtype,
            shape_text(&a.shape),
            a.shape.len()
        );
        if !a.shape.is_empty() {
            let _ = writeln!(
                s,
                "#define {upper}_{name}_SHAPE {{{}}}",
                a.shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "/* What a code {sym} returns means (\"\" for 0). */\nstatic inline const char *{sym}_error(int32_t code) {{\n    switch (code) {{\n    case 0: return \"\";",
        sym = h.symbol
    );
    for (i, e) in h.errors.iter().enumerate() {
        let _ = writeln!(s, "    case {}: return \"{}\";", i + 1, c_string(e));
    }
    let _ = writeln!(
        s,
        "    default: return \"not a code of {sym}\";\n    }}\n}}\n",
        sym = h.symbol
    );
    let _ = writeln!(s, "{};\n", prototype(h));
    s.push_str(&compact_call(h));
    let _ = writeln!(
        s,
        "
#ifdef __cplusplus
}}
#endif

#endif /* {guard} */"
    );
    s
}

/// The compact calling convention: `NAME_call(inputs, outputs, scratch)` with the arrays in two
/// lists, in the order of the `_INDEX` macros, so that a caller of a function of hundreds of
/// arrays (an Adam step) loops over them instead of writing every argument. A `static inline`
/// wrapper over the entry point, in the header: the object is the same.
fn compact_call(h: &HeaderInfo) -> String {
    let (sym, upper) = (h.symbol, h.symbol.to_uppercase());
    let mut args: Vec<String> = (h.inputs.iter().enumerate())
        .map(|(i, a)| format!("(const {} *)inputs[{i}]", c_type(a.dtype)))
        .collect();
    args.extend(
        (h.outputs.iter().enumerate()).map(|(o, a)| format!("({} *)outputs[{o}]", c_type(a.dtype))),
    );
    let mut unused = Vec::new();
    if h.inputs.is_empty() {
        unused.push("(void)inputs;");
    }
    if h.outputs.is_empty() {
        unused.push("(void)outputs;");
    }
    if h.scratch_bytes > 0 {
        args.push("scratch".into());
    } else {
        unused.push("(void)scratch;");
    }
    let unused = match unused.is_empty() {
        true => String::new(),
        false => format!("    {}\n", unused.join(" ")),
    };
    format!(
        "/* The same call with the arrays in two lists: inputs[k] is the input whose _INDEX is k,
 * outputs[k] the output whose _INDEX is k ({n_in} and {n_out} of them); scratch as above (NULL
 * where none is needed). */
#define {upper}_INPUTS ((size_t){n_in})
#define {upper}_OUTPUTS ((size_t){n_out})
static inline int32_t {sym}_call(const void *const *inputs, void *const *outputs, void *scratch) {{
{unused}    return {sym}({});
}}
",
        args.join(", "),
        n_in = h.inputs.len(),
        n_out = h.outputs.len(),
    )
}

/// `text` inside a C comment: no `*/` closes it early.
fn comment_safe(text: &str) -> String {
    text.replace("*/", "* /")
}

/// `text` as the inside of a C string literal (printable ASCII; anything else escaped).
fn c_string(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out
}

/// `n` elements, in words: "1 element", "5 elements".
fn elements(n: usize) -> String {
    match n {
        1 => "1 element".to_string(),
        n => format!("{n} elements"),
    }
}
