//! A debug print of a graph in the style of Theano's `debugprint`: an indented tree per output,
//! with an id for every node so that a node used twice is printed once and referenced after.

use super::{GraphData, Var, VarId, VarKind};
use std::collections::HashMap;
use std::fmt::Write;

/// Prints the graphs of `outputs`, one tree each.
///
/// ```text
/// add [id A] 'y' : f32[?, 3]
///  |exp [id B] : f32[?, 3]
///  | |x [id C] : f32[?, 3]
///  |[id B] (printed above)
/// ```
pub fn debugprint(outputs: &[&Var]) -> String {
    let mut out = String::new();
    let Some(first) = outputs.first() else {
        return out;
    };
    let g = first.graph().data();
    let mut ids = HashMap::new();
    for v in outputs {
        print_tree(&g, v.id, &mut ids, &mut out);
    }
    out
}

/// Indentation stops growing past this depth (the depth is then written on the line): a
/// chain a million deep prints a million lines, not a million squared characters.
const MAX_INDENT: usize = 64;

/// The tree of `root`, depth first, with an explicit stack (a graph may be deeper than the
/// thread's stack).
fn print_tree(g: &GraphData, root: VarId, ids: &mut HashMap<VarId, String>, out: &mut String) {
    let mut stack = vec![(root, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let mut prefix = " |".repeat(depth.min(MAX_INDENT));
        if depth > MAX_INDENT {
            let _ = write!(prefix, "(depth {depth}) ");
        }
        let inputs = print_var(g, v, &prefix, ids, out);
        stack.extend(inputs.iter().rev().map(|&i| (i, depth + 1)));
    }
}

fn id_name(n: usize) -> String {
    // A, B, ..., Z, BA, BB, ...: Theano's ids.
    let mut s = String::new();
    let mut n = n;
    loop {
        s.insert(0, (b'A' + (n % 26) as u8) as char);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    s
}

/// Prints the line of `v` and returns the inputs to print under it (none where it was
/// printed above).
fn print_var(
    g: &GraphData,
    v: VarId,
    prefix: &str,
    ids: &mut HashMap<VarId, String>,
    out: &mut String,
) -> Vec<VarId> {
    let data = &g.vars[v.0 as usize];
    if let Some(id) = ids.get(&v) {
        let _ = writeln!(out, "{prefix}[id {id}] (printed above)");
        return Vec::new();
    }
    let id = id_name(ids.len());
    ids.insert(v, id.clone());
    let name = data
        .name
        .as_ref()
        .map(|n| format!(" '{n}'"))
        .unwrap_or_default();
    let ty = &data.ty;
    match &data.kind {
        VarKind::Result { apply, index } => {
            let a = &g.applies[apply.0 as usize];
            let idx = if a.outputs.len() > 1 {
                format!(".{index}")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{prefix}{}{idx} [id {id}]{name} : {ty}",
                describe_op(&a.op)
            );
            return a.inputs.to_vec();
        }
        VarKind::Input => {
            let _ = writeln!(
                out,
                "{prefix}{} [id {id}] : {ty}",
                data.name.as_deref().unwrap_or("<input>")
            );
        }
        VarKind::Shared(_) => {
            let _ = writeln!(
                out,
                "{prefix}{} [id {id}] (shared) : {ty}",
                data.name.as_deref().unwrap_or("<shared>")
            );
        }
        VarKind::Constant(t) => {
            let text = if t.len() <= 4 {
                format!("{t}")
            } else {
                format!("<{} elements>", t.len())
            };
            let _ = writeln!(
                out,
                "{prefix}Constant{{{}}} [id {id}]{name} : {ty}",
                text.replace('\n', " ")
            );
        }
        VarKind::RegionParam => {
            let _ = writeln!(out, "{prefix}<scan parameter> [id {id}] : {ty}");
        }
        VarKind::Poisoned(e) => {
            let _ = writeln!(out, "{prefix}<error: {e}> [id {id}]");
        }
    }
    Vec::new()
}

/// The op with its parameters, as Theano shows `Elemwise{add}` or `Sum{axis=[1]}`.
fn describe_op(op: &crate::ir::Op) -> String {
    use crate::ir::Op;
    match op {
        Op::Reduce { axes, keepdims, .. } => {
            let axes = axes
                .as_ref()
                .map(|a| format!("{a:?}"))
                .unwrap_or_else(|| "all".into());
            format!("{}{{axes={axes}, keepdims={keepdims}}}", op.name())
        }
        Op::Cast { to } => format!("cast{{{to}}}"),
        Op::Transpose { perm } => format!("transpose{{{perm:?}}}"),
        Op::Reshape { shape } => format!("reshape{{{shape:?}}}"),
        _ => op.name().to_string(),
    }
}
