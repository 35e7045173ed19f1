//! The printer of the text form. It always writes each instruction's type, keeps value names
//! where they are valid and unique, and numbers the rest, so that `print(parse(print(f)))` is
//! `print(f)`.

use super::attrs::{f32_text, float_text, inst_attrs};
use crate::ir::{Func, Inst, Op, Region, TensorType, Value};
use crate::tensor::Tensor;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// Prints several functions, separated by blank lines.
pub fn print_funcs(funcs: &[Func]) -> String {
    funcs.iter().map(print_func).collect::<Vec<_>>().join("\n")
}

/// The text form of `f`: `func @name(params) -> (types) { ... }`, every instruction with its
/// result types. Parsing the text and printing it again gives the same text.
pub fn print_func(f: &Func) -> String {
    let names = name_values(f);
    let n = |v: &Value| value_name(&names, *v);
    let mut out = String::new();
    let params: Vec<String> = f
        .params
        .iter()
        .map(|p| format!("{}: {}", n(p), f.ty(*p)))
        .collect();
    let rets: Vec<String> = f.outputs.iter().map(|o| f.ty(*o).to_string()).collect();
    let _ = writeln!(
        out,
        "func @{}({}) -> ({}) {{",
        f.name,
        params.join(", "),
        rets.join(", ")
    );
    print_body(f, &f.body, &names, 1, &mut out);
    let _ = writeln!(
        out,
        "  return {}",
        f.outputs.iter().map(n).collect::<Vec<_>>().join(", ")
    );
    out.push_str("}\n");
    out
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
}

/// A printable name for every value: its own where valid and not taken, else a number that no
/// other value is called.
fn name_values(f: &Func) -> HashMap<Value, String> {
    let mut order: Vec<Value> = f.params.clone();
    fn visit(body: &[Inst], order: &mut Vec<Value>) {
        for i in body {
            for r in &i.regions {
                order.extend(&r.params);
                visit(&r.body, order);
            }
            order.extend(&i.results);
        }
    }
    visit(&f.body, &mut order);
    let mut taken: HashSet<String> = HashSet::new();
    let mut names: HashMap<Value, String> = HashMap::new();
    for &v in &order {
        if let Some(n) = f.name_of(v) {
            if valid_name(n) && taken.insert(n.to_string()) {
                names.insert(v, n.to_string());
            }
        }
    }
    let mut next = 0usize;
    for &v in &order {
        if names.contains_key(&v) {
            continue;
        }
        while taken.contains(&next.to_string()) {
            next += 1;
        }
        taken.insert(next.to_string());
        names.insert(v, next.to_string());
    }
    names
}

/// A value's printed name; a value defined nowhere (an invalid function, being reported) prints
/// as `%<undefined N>` so that printing never fails.
fn value_name(names: &HashMap<Value, String>, v: Value) -> String {
    match names.get(&v) {
        Some(n) => format!("%{n}"),
        None => format!("%<undefined {}>", v.0),
    }
}

fn types_text(tys: &[&TensorType]) -> String {
    if tys.len() == 1 {
        tys[0].to_string()
    } else {
        format!(
            "({})",
            tys.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn print_body(
    f: &Func,
    body: &[Inst],
    names: &HashMap<Value, String>,
    depth: usize,
    out: &mut String,
) {
    let pad = "  ".repeat(depth);
    let n = |v: &Value| value_name(names, *v);
    for inst in body {
        let results = inst.results.iter().map(n).collect::<Vec<_>>().join(", ");
        let tys: Vec<&TensorType> = inst.results.iter().map(|r| f.ty(*r)).collect();
        let args = inst.args.iter().map(n).collect::<Vec<_>>().join(", ");
        match &inst.op {
            Op::Const(t) => {
                let _ = writeln!(
                    out,
                    "{pad}{results} = const {} : {}",
                    literal(t),
                    types_text(&tys)
                );
            }
            Op::IfElse => {
                let _ = writeln!(out, "{pad}{results} = ifelse {args} {{");
                let empty = Region::default();
                print_region(
                    f,
                    inst.regions.first().unwrap_or(&empty),
                    names,
                    depth + 1,
                    out,
                );
                let _ = writeln!(out, "{pad}}} else {{");
                print_region(
                    f,
                    inst.regions.get(1).unwrap_or(&empty),
                    names,
                    depth + 1,
                    out,
                );
                let _ = writeln!(out, "{pad}}} : {}", types_text(&tys));
            }
            Op::Scan { carries, reverse } => {
                let empty = Region::default();
                let r = inst.regions.first().unwrap_or(&empty);
                let params = r
                    .params
                    .iter()
                    .map(|p| format!("{}: {}", n(p), f.ty(*p)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let rev = if *reverse { ", reverse = true" } else { "" };
                let _ = writeln!(
                    out,
                    "{pad}{results} = scan {args} {{carries = {carries}{rev}}} ({params}) {{"
                );
                print_region(f, r, names, depth + 1, out);
                let _ = writeln!(out, "{pad}}} : {}", types_text(&tys));
            }
            op => {
                let name = op_head(op);
                let sep = if args.is_empty() { "" } else { " " };
                let _ = writeln!(
                    out,
                    "{pad}{results} = {name}{sep}{args}{} : {}",
                    inst_attrs(op, inst.inplace),
                    types_text(&tys)
                );
            }
        }
    }
}

/// An op's name as the text form writes it: `add`, `custom "NAME"`, `composite "NAME"`,
/// `fused_reduce "sum"`.
pub fn op_head(op: &Op) -> String {
    match op {
        Op::Custom(c) => format!("custom \"{}\"", c.name()),
        Op::Composite { name, .. } => format!("composite \"{name}\""),
        Op::FusedReduce { op: r, .. } => format!("fused_reduce \"{}\"", r.name()),
        _ => op.name().to_string(),
    }
}

fn print_region(
    f: &Func,
    r: &Region,
    names: &HashMap<Value, String>,
    depth: usize,
    out: &mut String,
) {
    print_body(f, &r.body, names, depth, out);
    let ys = r
        .yields
        .iter()
        .map(|v| value_name(names, *v))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "{}yield {ys}", "  ".repeat(depth));
}

/// A tensor as a (nested) list literal; a 0-d tensor as a plain number.
pub fn literal(t: &Tensor) -> String {
    let atoms: Vec<String> = match t {
        Tensor::Bool(a) => a.iter().map(|b| b.to_string()).collect(),
        Tensor::I32(a) => a.iter().map(|x| x.to_string()).collect(),
        Tensor::I64(a) => a.iter().map(|x| x.to_string()).collect(),
        Tensor::F32(a) => a.iter().map(|&x| f32_text(x)).collect(),
        Tensor::F64(a) => a.iter().map(|&x| float_text(x)).collect(),
        // A half's shortest f32 spelling parses back to it (it is exact in f32, and the
        // spelling lies far within half an ulp of the half).
        Tensor::F16(a) => a.iter().map(|&x| f32_text(x.to_f32())).collect(),
        Tensor::BF16(a) => a.iter().map(|&x| f32_text(x.to_f32())).collect(),
    };
    fn nest(shape: &[usize], atoms: &[String]) -> String {
        match shape.split_first() {
            None => atoms.first().cloned().unwrap_or_default(),
            Some((&n, rest)) => {
                let step: usize = rest.iter().product();
                let parts: Vec<String> = (0..n)
                    .map(|i| nest(rest, &atoms[i * step..(i + 1) * step]))
                    .collect();
                format!("[{}]", parts.join(", "))
            }
        }
    }
    nest(t.shape(), &atoms)
}
