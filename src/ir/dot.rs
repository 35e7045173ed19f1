//! A function as a Graphviz DOT graph (Theano's `pydotprint`): `KILN_DUMP=dot`, `kiln opt
//! --dot`. Parameters are ellipses, instructions boxes (op, result and type), outputs
//! double octagons; an edge runs from each value to each reader. A Composite kernel (or a
//! fused reduction) is a cluster holding its scalar program, so the picture shows what fusion
//! put into one kernel; `ifelse` branches and `scan` bodies are clusters of their own.
//! `dot -Tsvg f.dot -o f.svg` draws it.

use super::scalar::{ScalarOp, ScalarProgram};
use super::text::{float_text, op_head};
use super::{Func, Inst, Op, Value};
use std::collections::HashMap;
use std::fmt::Write;

/// `func` as a DOT digraph.
pub fn func_to_dot(func: &Func) -> String {
    let mut d = Dot {
        func,
        out: String::new(),
        edges: String::new(),
        node_of: HashMap::new(),
        next: 0,
    };
    let _ = writeln!(d.out, "digraph {} {{", quoted(&format!("@{}", func.name)));
    d.out.push_str(
        "  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"monospace\", fontsize=9];\n",
    );
    for &p in &func.params {
        let id = d.node(p);
        let label = format!("{}\\n{}", d.value_name(p), func.ty(p));
        let _ = writeln!(d.out, "  {id} [shape=ellipse, label={}];", quoted(&label));
    }
    d.block(&func.body, 1);
    for (k, &o) in func.outputs.iter().enumerate() {
        let _ = writeln!(
            d.out,
            "  out{k} [shape=doubleoctagon, label={}];",
            quoted(&format!("output {k}"))
        );
        let from = d
            .node_of
            .get(&o)
            .cloned()
            .unwrap_or_else(|| "missing".into());
        let _ = writeln!(d.edges, "  {from} -> out{k};");
    }
    d.out.push_str(&d.edges);
    d.out.push_str("}\n");
    d.out
}

struct Dot<'f> {
    func: &'f Func,
    /// The nodes, clusters holding theirs.
    out: String,
    /// The edges, written after every node: an edge written inside a cluster would pull both
    /// its ends into it.
    edges: String,
    /// The node that stands for each value (its parameter's, or its instruction's).
    node_of: HashMap<Value, String>,
    next: usize,
}

impl Dot<'_> {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    /// A node of its own for `v` (a parameter of the function or of a region).
    fn node(&mut self, v: Value) -> String {
        let id = format!("v{}", v.0);
        self.node_of.insert(v, id.clone());
        id
    }

    fn value_name(&self, v: Value) -> String {
        match self.func.name_of(v) {
            Some(n) => format!("%{n}"),
            None => v.to_string(),
        }
    }

    /// The edges from `args` to `to`, labelled by argument position where there are several.
    fn edges(&mut self, args: &[Value], to: &str) {
        for (k, a) in args.iter().enumerate() {
            let from = self
                .node_of
                .get(a)
                .cloned()
                .unwrap_or_else(|| "missing".into());
            let label = match args.len() {
                1 => String::new(),
                _ => format!(" [label=\"{k}\"]"),
            };
            let _ = writeln!(self.edges, "  {from} -> {to}{label};");
        }
    }

    fn block(&mut self, body: &[Inst], depth: usize) {
        for inst in body {
            self.inst(inst, depth);
        }
    }

    fn inst(&mut self, inst: &Inst, depth: usize) {
        let pad = "  ".repeat(depth);
        let results: Vec<String> = inst
            .results
            .iter()
            .map(|&r| format!("{} : {}", self.value_name(r), self.func.ty(r)))
            .collect();
        let head = op_head(&inst.op);
        let inplace = match inst.inplace {
            Some(k) => format!("\\nin place of argument {k}"),
            None => String::new(),
        };
        let label = format!("{head}{inplace}\\n{}", results.join("\\n"));
        let id = self.fresh("i");
        match &inst.op {
            Op::Composite { program, .. } | Op::FusedReduce { program, .. } => {
                let cluster = self.fresh("cluster_");
                let _ = writeln!(
                    self.out,
                    "{pad}subgraph {cluster} {{\n{pad}  label={};\n{pad}  style=\"rounded,filled\";\n{pad}  fillcolor=\"#eef4ff\";",
                    quoted(&format!("{head}: one kernel"))
                );
                let _ = writeln!(
                    self.out,
                    "{pad}  {id} [shape=box, style=bold, label={}];",
                    quoted(&label)
                );
                self.program(program, &inst.args, &id, depth + 1);
                let _ = writeln!(self.out, "{pad}}}");
            }
            _ => {
                let _ = writeln!(self.out, "{pad}{id} [shape=box, label={}];", quoted(&label));
                self.edges(&inst.args, &id);
                for (k, r) in inst.regions.iter().enumerate() {
                    let cluster = self.fresh("cluster_");
                    let what = match (&inst.op, k) {
                        (Op::IfElse, 0) => "then",
                        (Op::IfElse, _) => "else",
                        _ => "body",
                    };
                    let _ = writeln!(
                        self.out,
                        "{pad}subgraph {cluster} {{\n{pad}  label={};\n{pad}  style=dashed;",
                        quoted(&format!("{head}: {what}"))
                    );
                    for &p in &r.params {
                        let pid = self.node(p);
                        let l = format!("{}\\n{}", self.value_name(p), self.func.ty(p));
                        let _ = writeln!(
                            self.out,
                            "{pad}  {pid} [shape=ellipse, label={}];",
                            quoted(&l)
                        );
                    }
                    self.block(&r.body, depth + 1);
                    let y = self.fresh("yield");
                    let _ = writeln!(
                        self.out,
                        "{pad}  {y} [shape=box, style=dotted, label=\"yield\"];"
                    );
                    self.edges(&r.yields.clone(), &y);
                    let _ = writeln!(self.out, "{pad}}}");
                    let _ = writeln!(self.edges, "  {y} -> {id} [style=dotted];");
                }
            }
        }
        for &r in &inst.results {
            self.node_of.insert(r, id.clone());
        }
    }

    /// A kernel's scalar program inside its cluster: inputs fed by `args`, every register a
    /// small node, the outputs into the kernel's node `to`.
    fn program(&mut self, p: &ScalarProgram, args: &[Value], to: &str, depth: usize) {
        let pad = "  ".repeat(depth);
        let mut reg: Vec<String> = Vec::with_capacity(p.insts.len());
        for i in &p.insts {
            let id = self.fresh("s");
            let text = match &i.op {
                ScalarOp::Input(k) => format!("input {k}"),
                ScalarOp::Const(c) => float_text(c.0),
                ScalarOp::Unary(u) => u.name().to_string(),
                ScalarOp::Binary(b) => b.name().to_string(),
                ScalarOp::Select => "select".into(),
                ScalarOp::Cast(t) => format!("cast to {t}"),
            };
            let _ = writeln!(
                self.out,
                "{pad}{id} [shape=box, style=\"rounded\", fontsize=9, label={}];",
                quoted(&format!("{text} : {}", i.dtype))
            );
            if let ScalarOp::Input(k) = i.op {
                if let Some(a) = args.get(k) {
                    self.edges(&[*a], &id);
                }
            }
            for &a in &i.args {
                let _ = writeln!(self.edges, "  {} -> {id};", reg[a]);
            }
            reg.push(id);
        }
        for &o in &p.outputs {
            let _ = writeln!(self.edges, "  {} -> {to};", reg[o]);
        }
    }
}

/// `s` as a DOT string: quoted, with quotes and backslashes that are not our `\n` escaped.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'n') => {
                chars.next();
                out.push_str("\\n");
            }
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
