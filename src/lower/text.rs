//! The plan's text form (the `schedule` dump): it prints, and it parses back against the
//! function it was lowered from, so that lowering has file tests like the other passes and a
//! plan can be read, edited and run.
//!
//! One step a line; a branch or a row group opens a block:
//!
//! ```text
//! plan @f(%0, %1) {
//!   %2 = map add %0, %1 {%0 = input 0 : f32; %1 = input 1 : f32; %2 = add %0, %1 : f32; return %2} over [2, 4] reads (0, 1), (_, 0) inplace 0 ; frees %0
//!   %3 = reduce sum axes [1] keepdims %2 {%0 = input 0 : f32; return %0} over [2, 4] reads (0, 1) acc f32 from 0 pairwise 128x8 ; frees %2
//!   %4 = gemm %3^T, %1 update %5 scale 0.5 inplace 2
//!   %6 = view transpose %4 [1, 0]
//!   %7 = perform concat %6, %6 {axis = 0}
//!   return %7
//! }
//! ```
//!
//! Each step is its kind (`map`, `reduce`, `gemm`, `view`, `perform`, `ifelse`, `rows`), the
//! op it computes in the IR's spelling (name, arguments, attributes; a map's or reduction's
//! scalar program in braces), what the kind carries (index space and accesses, the reduction's
//! semantics, transposed operands and the fused update, the view, the branches, the members),
//! then clauses: `roles` (a row group member's reading of each argument), `stretch` (the `?`
//! axes checked at run time), `inplace` and `; frees`.
//!
//! The parser reads values as the function's (`%N` is value N) and takes their types from it.
//! What the IR defines is checked rather than taken as given: a reduction's `acc ... from ...
//! pairwise ...` must be what `ir::reduce` says for its op and dtype, a view what its op does.

use super::access::Access;
use super::gemm_update::GemmUpdate;
use super::rows::Role;
use super::stretch::{Frame, StretchCheck};
use super::view::{View, ViewAxis};
use super::{Branch, Kernel, Plan, Step, StepId};
use crate::error::Error;
use crate::ir::reduce::Order;
use crate::ir::scalar::ScalarProgram;
use crate::ir::text::{inst_attrs, op_head};
use crate::ir::{DType, Dim, Func, Op, ReduceOp, Reduction, Value};
use std::fmt::{self, Write};
use std::sync::Arc;

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "plan @{}({}) {{", self.name, list(&self.params))?;
        let mut text = String::new();
        write_steps(&self.steps, 1, &mut text);
        f.write_str(&text)?;
        writeln!(f, "  return {}", list(&self.outputs))?;
        writeln!(f, "}}")
    }
}

fn list(vs: &[Value]) -> String {
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` over [?, 4] reads (0, 1), (_, 0)`: the index space, then each argument's access.
fn write_access(out: &mut String, space: &[Dim], access: &[Access]) {
    let reads: Vec<String> = access.iter().map(Access::to_string).collect();
    let _ = write!(
        out,
        " over {} reads {}",
        crate::ir::types::ShapeDisplay(space),
        reads.join(", ")
    );
}

/// ` acc f32 from 0 pairwise 128x8`: what the reduction accumulates in, its starting value and
/// its order (`ir::reduce`).
fn reduction_text(r: &Reduction) -> String {
    let mut out = format!(" acc {}", r.acc);
    if let Some(start) = r.start {
        let _ = write!(out, " from {}", start.to_f64());
    }
    if let Order::Pairwise(p) = r.order {
        let _ = write!(out, " pairwise {}x{}", p.block, p.lanes);
    }
    out
}

/// `add %0, %1`, `cast %0 {to = f32}`, `custom "NAME" %0 {k = [1]}`: the op as the IR writes
/// it. A map step's composite has the step's program, printed once in braces (`in_map`).
fn op_call(op: &Op, args: &[Value], in_map: bool) -> String {
    let attrs = match op {
        Op::Composite { .. } if in_map => String::new(),
        op => inst_attrs(op, None),
    };
    let sep = if args.is_empty() { "" } else { " " };
    format!("{}{sep}{}{attrs}", op_head(op), list(args))
}

fn write_steps(steps: &[Step], depth: usize, out: &mut String) {
    write_members(steps, None, depth, out)
}

/// Steps, each with its `roles` when they are a row group's members.
fn write_members(steps: &[Step], roles: Option<&[Vec<Role>]>, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for (k, s) in steps.iter().enumerate() {
        let _ = write!(out, "{pad}{} = ", list(&s.results));
        let args = list(&s.args);
        match &s.kernel {
            Kernel::Map {
                program,
                space,
                access,
            } => {
                let _ = write!(out, "map {} {{{program}}}", op_call(&s.op, &s.args, true));
                write_access(out, space, access);
            }
            Kernel::Reduce {
                op,
                axes,
                keepdims,
                program,
                fused,
                space,
                access,
                reduction,
            } => {
                let _ = write!(out, "reduce {}", op.name());
                if *fused {
                    out.push_str(" fused");
                }
                if let Some(a) = axes {
                    let _ = write!(out, " axes {a:?}");
                }
                if *keepdims {
                    out.push_str(" keepdims");
                }
                let _ = write!(out, " {args} {{{program}}}");
                write_access(out, space, access);
                out.push_str(&reduction_text(reduction));
            }
            Kernel::Gemm { transposed, update } => {
                let marks: Vec<String> = s
                    .args
                    .iter()
                    .zip(transposed.iter().chain(std::iter::repeat(&false)))
                    .map(|(a, &t)| if t { format!("{a}^T") } else { a.to_string() })
                    .collect();
                let _ = write!(out, "gemm {}", marks[..marks.len().min(2)].join(", "));
                if let (Some(u), Some(w)) = (update, s.args.get(2)) {
                    let _ = write!(out, " update {w} scale {}", u.scale);
                }
            }
            Kernel::View(v) => {
                let _ = write!(out, "view {} {args} {v}", s.op.name());
            }
            Kernel::Perform => match &s.op {
                Op::Const(t) => {
                    let _ = write!(out, "perform const {}", crate::ir::text::literal(t));
                }
                op => {
                    let _ = write!(out, "perform {}", op_call(op, &s.args, false));
                }
            },
            Kernel::Rows { rows, steps, roles } => {
                let _ = writeln!(out, "rows {rows} {args} {{");
                write_members(steps, Some(roles), depth + 1, out);
                out.push_str(&pad);
                out.push('}');
            }
            Kernel::Scan {
                body,
                params,
                carries,
                reverse,
            } => {
                let rev = if *reverse { " reverse" } else { "" };
                let _ = writeln!(
                    out,
                    "scan carries {carries}{rev} {args} ({}) {{",
                    list(params)
                );
                write_branch(body, depth + 1, out);
                out.push_str(&pad);
                out.push('}');
            }
            Kernel::IfElse { then, otherwise } => {
                let _ = writeln!(out, "ifelse {args} {{");
                write_branch(then, depth + 1, out);
                let _ = writeln!(out, "{pad}}} else {{");
                write_branch(otherwise, depth + 1, out);
                out.push_str(&pad);
                out.push('}');
            }
        }
        if let Some(r) = roles.and_then(|r| r.get(k)) {
            let r: Vec<String> = r.iter().map(role_text).collect();
            let _ = write!(out, " roles ({})", r.join(", "));
        }
        if let Some(c) = &s.stretch {
            let frame = match &c.frame {
                Frame::Elementwise => "elementwise".to_string(),
                Frame::MatmulBatch => "batch".to_string(),
                Frame::To(t) => format!("to {t:?}"),
            };
            let axes: Vec<String> = c
                .unknown
                .iter()
                .map(|(a, x)| format!("({a}, {x})"))
                .collect();
            let _ = write!(out, " stretch {frame} {}", axes.join(", "));
        }
        if let Some(k) = s.inplace {
            let _ = write!(out, " inplace {k}");
        }
        if !s.frees.is_empty() {
            let _ = write!(out, " ; frees {}", list(&s.frees));
        }
        out.push('\n');
    }
}

fn role_text(r: &Role) -> String {
    match r {
        Role::Rows => "rows".into(),
        Role::Whole => "whole".into(),
        Role::Inner(j) => format!("inner {j}"),
    }
}

fn write_branch(b: &Branch, depth: usize, out: &mut String) {
    write_steps(&b.steps, depth, out);
    let _ = writeln!(out, "{}yield {}", "  ".repeat(depth), list(&b.yields));
}

/// Parses the text of a plan of `func` (as [`Plan`]'s `Display` writes it). `file` names the
/// text in errors. The result is numbered and has a serial of its own; it equals the plan the
/// text was printed from.
pub fn parse_plan(file: &str, src: &str, func: &Func) -> Result<Plan, Error> {
    let mut c = Cursor { src, pos: 0, func };
    let plan = c.plan().map_err(|(pos, msg)| {
        let before = &src[..pos.min(src.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
        Error::Parse {
            file: file.to_string(),
            line,
            col,
            msg,
        }
    })?;
    Ok(plan)
}

type R<T> = Result<T, (usize, String)>;

/// A position in the text. Whitespace (newlines included) separates tokens; the grammar, not
/// the lines, says where a step ends.
struct Cursor<'a> {
    src: &'a str,
    pos: usize,
    func: &'a Func,
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+')
}

impl<'a> Cursor<'a> {
    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        Err((self.pos, msg.into()))
    }

    fn rest(&mut self) -> &'a str {
        let src = self.src;
        let trimmed = src[self.pos..].trim_start();
        self.pos = src.len() - trimmed.len();
        trimmed
    }

    fn peek(&mut self) -> Option<char> {
        self.rest().chars().next()
    }

    /// Takes `t` if the text goes on with it (a whole word, when `t` is one).
    fn eat(&mut self, t: &str) -> bool {
        let rest = self.rest();
        let Some(after) = rest.strip_prefix(t) else {
            return false;
        };
        if !t.ends_with(is_word) || !after.starts_with(is_word) {
            self.pos += t.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &str) -> R<()> {
        if self.eat(t) {
            return Ok(());
        }
        let found: String = self.rest().chars().take(20).collect();
        self.err(format!("expected `{t}`, found `{found}`"))
    }

    fn word(&mut self) -> R<&'a str> {
        let rest = self.rest();
        let n = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        if n == 0 {
            let found: String = rest.chars().take(20).collect();
            return self.err(format!("expected a word, found `{found}`"));
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> R<T> {
        let at = self.pos;
        let w = self.word()?;
        w.parse()
            .map_err(|_| (at, format!("expected {what}, found `{w}`")))
    }

    fn dtype(&mut self) -> R<DType> {
        let at = self.pos;
        self.word()?.parse().map_err(|e: String| (at, e))
    }

    /// `%N`: value N of the function.
    fn value(&mut self) -> R<Value> {
        self.expect("%")?;
        let at = self.pos;
        let n: usize = self.number("a value number")?;
        if n >= self.func.values.len() {
            return Err((at, format!("%{n} is not a value of @{}", self.func.name)));
        }
        Ok(Value(n as u32))
    }

    /// `%a, %b, ...`, possibly none.
    fn values(&mut self) -> R<Vec<Value>> {
        let mut out = Vec::new();
        if self.peek() != Some('%') {
            return Ok(out);
        }
        loop {
            out.push(self.value()?);
            if !self.eat(",") {
                return Ok(out);
            }
        }
    }

    /// The text between `open` and its matching `close` (strings skipped), both taken.
    fn group(&mut self, open: char, close: char) -> R<&'a str> {
        self.expect(&open.to_string())?;
        let start = self.pos;
        let (mut depth, mut in_str) = (1usize, false);
        for (i, ch) in self.src[start..].char_indices() {
            match ch {
                '"' => in_str = !in_str,
                _ if in_str => {}
                c if c == open => depth += 1,
                c if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos = start + i + 1;
                        return Ok(&self.src[start..start + i]);
                    }
                }
                _ => {}
            }
        }
        self.err(format!("`{open}` is not closed"))
    }

    /// `"text"`, no escapes (the IR's names and programs have no quotes).
    fn string(&mut self) -> R<&'a str> {
        self.expect("\"")?;
        let rest = &self.src[self.pos..];
        let n = rest
            .find('"')
            .ok_or_else(|| (self.pos, "a string is not closed".to_string()))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    /// `[1, 2]` of numbers.
    fn numbers<T: std::str::FromStr>(&mut self) -> R<Vec<T>> {
        self.items('[', ']', "number", |s| s.parse().ok())
    }

    fn plan(&mut self) -> R<Plan> {
        self.expect("plan")?;
        self.expect("@")?;
        let rest = self.rest();
        let name = &rest[..rest.find('(').unwrap_or(0)];
        if name != self.func.name {
            return self.err(format!(
                "the plan is of @{name}, the function is @{}",
                self.func.name
            ));
        }
        self.pos += name.len();
        self.expect("(")?;
        let params = self.values()?;
        self.expect(")")?;
        self.expect("{")?;
        let mut steps = self.steps()?;
        self.expect("return")?;
        let outputs = self.values()?;
        self.expect("}")?;
        if self.peek().is_some() {
            return self.err("unexpected text after the plan");
        }
        if params != self.func.params || outputs != self.func.outputs {
            return self.err(format!(
                "the plan's parameters and results are not those of @{}",
                self.func.name
            ));
        }
        let n_steps = super::number(&mut steps, 0);
        Ok(Plan {
            name: name.to_string(),
            n_steps,
            serial: super::next_serial(),
            params,
            steps,
            outputs,
        })
    }

    fn steps(&mut self) -> R<Vec<Step>> {
        let mut out = Vec::new();
        while self.peek() == Some('%') {
            out.push(self.step()?.0);
        }
        Ok(out)
    }

    /// One step and its `roles` clause, if it has one.
    fn step(&mut self) -> R<(Step, Option<Vec<Role>>)> {
        let results = self.values()?;
        self.expect("=")?;
        let at = self.pos;
        let kind = self.word()?;
        let (op, args, kernel) = match kind {
            "map" => self.map()?,
            "reduce" => self.reduce()?,
            "gemm" => self.gemm()?,
            "view" => self.view()?,
            "perform" => self.perform(&results)?,
            "ifelse" => {
                let args = self.values()?;
                self.expect("{")?;
                let then = self.branch()?;
                self.expect("}")?;
                self.expect("else")?;
                self.expect("{")?;
                let otherwise = self.branch()?;
                self.expect("}")?;
                (Op::IfElse, args, Kernel::IfElse { then, otherwise })
            }
            "scan" => {
                self.expect("carries")?;
                let carries: usize = self.number("a carry count")?;
                let reverse = self.eat("reverse");
                let args = self.values()?;
                self.expect("(")?;
                let params = self.values()?;
                self.expect(")")?;
                self.expect("{")?;
                let body = self.branch()?;
                self.expect("}")?;
                let kernel = Kernel::Scan {
                    body,
                    params,
                    carries,
                    reverse,
                };
                (Op::Scan { carries, reverse }, args, kernel)
            }
            "rows" => self.rows()?,
            k => return Err((at, format!("unknown step kind `{k}`"))),
        };
        let roles = if self.eat("roles") {
            Some(self.items('(', ')', "role", |r| {
                match r {
                    "rows" => Some(Role::Rows),
                    "whole" => Some(Role::Whole),
                    r => r
                        .strip_prefix("inner ")
                        .and_then(|j| j.trim().parse().ok())
                        .map(Role::Inner),
                }
            })?)
        } else {
            None
        };
        let stretch = if self.eat("stretch") {
            let frame = match self.word()? {
                "elementwise" => Frame::Elementwise,
                "batch" => Frame::MatmulBatch,
                "to" => Frame::To(self.numbers()?),
                f => return Err((at, format!("unknown stretch frame `{f}`"))),
            };
            let mut unknown = Vec::new();
            while self.peek() == Some('(') {
                let pair: Vec<usize> = self
                    .group('(', ')')?
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| (at, "a stretch axis is `(argument, axis)`".to_string()))?;
                let [a, x] = pair[..] else {
                    return Err((at, "a stretch axis is `(argument, axis)`".into()));
                };
                if a >= args.len() {
                    return Err((at, format!("stretch names argument {a} of {}", args.len())));
                }
                unknown.push((a, x));
                self.eat(",");
            }
            Some(StretchCheck { frame, unknown })
        } else {
            None
        };
        let inplace = if self.eat("inplace") {
            let k: usize = self.number("an argument index")?;
            if k >= args.len() {
                return Err((at, format!("inplace {k} names no argument")));
            }
            Some(k)
        } else {
            None
        };
        let frees = if self.eat(";") {
            self.expect("frees")?;
            self.values()?
        } else {
            Vec::new()
        };
        let step = Step {
            id: StepId::UNNUMBERED,
            kernel,
            op,
            args,
            results,
            inplace,
            frees,
            stretch,
        };
        self.check(&step, at)?;
        Ok((step, roles))
    }

    /// What the runtime relies on and the grammar does not say: counts that match.
    fn check(&self, s: &Step, at: usize) -> R<()> {
        let bad = |msg: String| Err((at, msg));
        let ranks: Vec<usize> = s.args.iter().map(|&a| self.func.ty(a).rank()).collect();
        match &s.kernel {
            Kernel::Map {
                program,
                space,
                access,
            }
            | Kernel::Reduce {
                program,
                space,
                access,
                ..
            } => {
                if access.len() != s.args.len() {
                    return bad(format!(
                        "{} accesses for {} arguments",
                        access.len(),
                        s.args.len()
                    ));
                }
                for (a, &rank) in access.iter().zip(&ranks) {
                    if a.axes.len() != space.len() || a.axes.iter().flatten().any(|&j| j >= rank) {
                        return bad(format!("the access {a} does not fit the index space"));
                    }
                }
                if program.input_dtypes().len() > s.args.len() {
                    return bad("the program reads more inputs than the step has".into());
                }
                let outs = if matches!(s.kernel, Kernel::Reduce { .. }) {
                    1
                } else {
                    s.results.len()
                };
                if program.outputs.len() != outs {
                    return bad(format!(
                        "the program has {} outputs for {outs} results",
                        program.outputs.len()
                    ));
                }
            }
            Kernel::Gemm { update, .. }
                if s.args.len() != 2 + usize::from(update.is_some()) || s.results.len() != 1 =>
            {
                return bad("a gemm reads two matrices (and a third to update)".into());
            }
            Kernel::View(_) if s.args.len() != 1 || s.results.len() != 1 => {
                return bad("a view has one argument and one result".into())
            }
            Kernel::IfElse { then, otherwise }
                if s.args.len() != 1
                    || then.yields.len() != s.results.len()
                    || otherwise.yields.len() != s.results.len() =>
            {
                return bad("an ifelse takes a condition and yields its results".into());
            }
            Kernel::Scan {
                body,
                params,
                carries,
                ..
            } if s.args.len() != params.len()
                || body.yields.len() != s.results.len()
                || *carries > params.len() =>
            {
                return bad("a scan takes a value per parameter and yields its results".into());
            }
            _ => {}
        }
        Ok(())
    }

    fn branch(&mut self) -> R<Branch> {
        let steps = self.steps()?;
        self.expect("yield")?;
        let yields = self.values()?;
        Ok(Branch { steps, yields })
    }

    fn arg_types(&self, args: &[Value]) -> Vec<crate::ir::TensorType> {
        args.iter().map(|&a| self.func.ty(a).clone()).collect()
    }

    /// `add`, `custom "NAME"`, `composite "NAME"`: the op's name and its string.
    fn op_name(&mut self) -> R<(&'a str, Option<&'a str>)> {
        let name = self.word()?;
        let custom = match self.peek() {
            Some('"') => Some(self.string()?),
            _ => None,
        };
        Ok((name, custom))
    }

    /// `{...}` if the text goes on with attributes (not a scalar program, which starts with a
    /// register or `return`), else nothing.
    fn attrs(&mut self) -> R<&'a str> {
        let rest = self.rest();
        let after = rest.get(1..).map(str::trim_start).unwrap_or("");
        if rest.starts_with('{') && !after.starts_with('%') && !after.starts_with("return") {
            let at = self.pos;
            self.group('{', '}')?;
            return Ok(&self.src[at..self.pos]);
        }
        Ok("")
    }

    fn program(&mut self) -> R<ScalarProgram> {
        let at = self.pos;
        let text = self.group('{', '}')?;
        crate::ir::scalar::parse_program(text).map_err(|e| (at, e))
    }

    fn op(
        &self,
        at: usize,
        name: &str,
        custom: Option<&str>,
        attrs: &str,
        args: &[Value],
    ) -> R<Op> {
        crate::ir::text::parse_op(name, custom, attrs, &self.arg_types(args)).map_err(|e| (at, e))
    }

    /// ` over [2, ?] reads (0, 1), (_, 0)`.
    fn space_and_access(&mut self, n_args: usize) -> R<(Vec<Dim>, Vec<Access>)> {
        self.expect("over")?;
        let space = self.items('[', ']', "dim", |d| match d {
            "?" => Some(None),
            d => d.parse().ok().map(Some),
        })?;
        self.expect("reads")?;
        let mut access = Vec::new();
        for k in 0..n_args {
            if k > 0 {
                self.expect(",")?;
            }
            let axes = self.items('(', ')', "axis", |a| match a {
                "_" => Some(None),
                a => a.parse().ok().map(Some),
            })?;
            access.push(Access { axes });
        }
        Ok((space, access))
    }

    /// The comma-separated items between `open` and `close`, each read by `item`.
    fn items<T>(
        &mut self,
        open: char,
        close: char,
        what: &str,
        item: impl Fn(&str) -> Option<T>,
    ) -> R<Vec<T>> {
        let at = self.pos;
        self.group(open, close)?
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|x| item(x).ok_or_else(|| (at, format!("bad {what} `{x}`"))))
            .collect()
    }

    fn map(&mut self) -> R<(Op, Vec<Value>, Kernel)> {
        let at = self.pos;
        let (name, custom) = self.op_name()?;
        let args = self.values()?;
        let attrs = self.attrs()?;
        let program = Arc::new(self.program()?);
        let op = match (name, custom) {
            ("composite", Some(n)) => Op::Composite {
                name: n.to_string(),
                program: program.clone(),
            },
            _ => self.op(at, name, custom, attrs, &args)?,
        };
        let (space, access) = self.space_and_access(args.len())?;
        let kernel = Kernel::Map {
            program,
            space,
            access,
        };
        Ok((op, args, kernel))
    }

    fn reduce(&mut self) -> R<(Op, Vec<Value>, Kernel)> {
        let at = self.pos;
        let name = self.word()?;
        let op = *ReduceOp::ALL
            .iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| (at, format!("unknown reduction `{name}`")))?;
        let fused = self.eat("fused");
        let axes = if self.eat("axes") {
            Some(self.numbers()?)
        } else {
            None
        };
        let keepdims = self.eat("keepdims");
        let args = self.values()?;
        let program = Arc::new(self.program()?);
        let (space, access) = self.space_and_access(args.len())?;
        if axes.iter().flatten().any(|&a| a >= space.len()) {
            return Err((at, "a reduced axis is outside the index space".into()));
        }
        let value = match program.outputs.first() {
            Some(&o) => program.insts[o].dtype,
            None => return Err((at, "the program has no output".into())),
        };
        let reduction = Reduction::of(op, value);
        // The semantics are `ir::reduce`'s; the text shows them and must agree.
        let text_at = self.pos;
        let mut text = String::new();
        self.expect("acc")?;
        let _ = write!(text, " acc {}", self.dtype()?);
        if self.eat("from") {
            let _ = write!(text, " from {}", self.word()?);
        }
        if self.eat("pairwise") {
            let _ = write!(text, " pairwise {}", self.word()?);
        }
        let want = reduction_text(&reduction);
        if text != want {
            return Err((
                text_at,
                format!(
                    "the reduction says `{}`, but {name} of {value} is `{}`",
                    text.trim(),
                    want.trim()
                ),
            ));
        }
        let full = if fused {
            Op::FusedReduce {
                op,
                axes: axes.clone(),
                keepdims,
                program: program.clone(),
            }
        } else {
            Op::Reduce {
                op,
                axes: axes.clone(),
                keepdims,
            }
        };
        let kernel = Kernel::Reduce {
            op,
            axes,
            keepdims,
            program,
            fused,
            space,
            access,
            reduction,
        };
        Ok((full, args, kernel))
    }

    fn gemm(&mut self) -> R<(Op, Vec<Value>, Kernel)> {
        let mut args = Vec::new();
        let mut transposed = [false; 2];
        for (k, t) in transposed.iter_mut().enumerate() {
            if k > 0 {
                self.expect(",")?;
            }
            args.push(self.value()?);
            *t = self.eat("^T");
        }
        let update = if self.eat("update") {
            args.push(self.value()?);
            self.expect("scale")?;
            Some(GemmUpdate {
                scale: self.number("a scale")?,
            })
        } else {
            None
        };
        Ok((Op::MatMul, args, Kernel::Gemm { transposed, update }))
    }

    fn view(&mut self) -> R<(Op, Vec<Value>, Kernel)> {
        let at = self.pos;
        let name = self.word()?;
        let args = self.values()?;
        let view = if self.eat("to") {
            View::Reshape {
                target: self.numbers()?,
            }
        } else {
            let inner = self.group('[', ']')?;
            let axes = split_top(inner)
                .into_iter()
                .map(|a| view_axis(a).ok_or_else(|| (at, format!("bad view axis `{a}`"))))
                .collect::<R<Vec<ViewAxis>>>()?;
            let dropped = if self.eat("drop") {
                self.numbers()?
            } else {
                Vec::new()
            };
            View::Axes { axes, dropped }
        };
        let op = view
            .to_op(name)
            .ok_or_else(|| (at, format!("`{name}` gives no view {view}")))?;
        let rank = args.first().map_or(0, |&a| self.func.ty(a).rank());
        if View::of(&op, rank).as_ref() != Some(&view) {
            return Err((at, format!("{name} of rank {rank} is not the view {view}")));
        }
        Ok((op, args, Kernel::View(view)))
    }

    fn perform(&mut self, results: &[Value]) -> R<(Op, Vec<Value>, Kernel)> {
        let at = self.pos;
        let (name, custom) = self.op_name()?;
        if name == "const" {
            let lit = match self.peek() {
                Some('[') => {
                    let start = self.pos;
                    self.group('[', ']')?;
                    &self.src[start..self.pos]
                }
                _ => self.word()?,
            };
            let &[r] = results else {
                return Err((at, "a constant has one result".into()));
            };
            let t = crate::ir::text::parse_literal(lit, self.func.ty(r)).map_err(|e| (at, e))?;
            return Ok((Op::Const(t), Vec::new(), Kernel::Perform));
        }
        let args = self.values()?;
        let attrs = self.attrs()?;
        let op = self.op(at, name, custom, attrs, &args)?;
        Ok((op, args, Kernel::Perform))
    }

    fn rows(&mut self) -> R<(Op, Vec<Value>, Kernel)> {
        let at = self.pos;
        let rows: usize = self.number("a row count")?;
        let args = self.values()?;
        self.expect("{")?;
        let (mut steps, mut roles) = (Vec::new(), Vec::new());
        while self.peek() == Some('%') {
            let (s, r) = self.step()?;
            let r = r.ok_or_else(|| (at, "a row group's member needs its roles".to_string()))?;
            let fits = r.len() == s.args.len()
                && r.iter()
                    .all(|x| !matches!(x, Role::Inner(j) if *j >= steps.len()));
            if !fits {
                return Err((at, "a member's roles do not fit its arguments".into()));
            }
            steps.push(s);
            roles.push(r);
        }
        self.expect("}")?;
        let op = match steps.first() {
            Some(s) => s.op.clone(),
            None => return Err((at, "a row group has members".into())),
        };
        Ok((op, args, Kernel::Rows { rows, steps, roles }))
    }
}

/// `a, b[1:2:3], c` split at the commas outside brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

/// `0`, `new 2`, `1 to 4`, `0[1:7:2]`, `1[::-1]`.
fn view_axis(s: &str) -> Option<ViewAxis> {
    if let Some(len) = s.strip_prefix("new ") {
        return Some(ViewAxis::New {
            len: len.trim().parse().ok()?,
        });
    }
    if let Some((axis, len)) = s.split_once(" to ") {
        return Some(ViewAxis::Stretch {
            axis: axis.trim().parse().ok()?,
            len: len.trim().parse().ok()?,
        });
    }
    if let Some((axis, range)) = s.split_once('[') {
        let parts: Vec<&str> = range.strip_suffix(']')?.split(':').collect();
        let [start, stop, step] = parts[..] else {
            return None;
        };
        let step: i64 = step.trim().parse().ok()?;
        let (from, to) = super::view::omitted_bounds(step);
        let bound = |b: &str, omitted: i64| match b.trim() {
            "" => Some(omitted),
            b => b.parse().ok(),
        };
        return Some(ViewAxis::Slice {
            axis: axis.trim().parse().ok()?,
            start: bound(start, from)?,
            stop: bound(stop, to)?,
            step,
        });
    }
    s.parse().ok().map(ViewAxis::Same)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::{lower_with, LowerOptions};

    /// Every kind of step and clause: a row group (softmax rows), a fused gradient update with
    /// a folded transpose, a `?` dim checked at run time, views, a constant, a cast, a random
    /// op, a concat and an `ifelse`.
    const ALL_KINDS: &str = r#"
func @f(%x: f32[8, 16], %d: f32[8, 4], %w: f32[16, 4], %c: bool[], %v: f32[?, 16]) -> (f32[8, 16], f32[16, 4], f32[8, 16], f32[8, 16], f32[16, 8], f32[2, 3], f32[16, 16], f32[8, 16]) {
  %m = max %x {axes = [1], keepdims = true}
  %e0 = sub %x, %m
  %e = exp %e0
  %s = sum %e {axes = [1], keepdims = true}
  %p = div %e, %s
  %xt = transpose %x {perm = [1, 0]}
  %g = matmul %xt, %d
  %u = composite "fused" %g, %w {program = "%0 = const 0.5 : f32; %1 = input 0 : f32; %2 = mul %1, %0 : f32; %3 = input 1 : f32; %4 = sub %3, %2 : f32; return %4", inplace = 1} : f32[16, 4]
  %r = slice %x {starts = [null], stops = [null], steps = [-1]}
  %q = add %v, %x
  %t = transpose %x {perm = [1, 0]}
  %i = cast %t {to = i32}
  %f = cast %i {to = f32}
  %k = const [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] : f32[2, 3]
  %n = uniform {seed = 7, shape = [16, 8], dtype = f32}
  %j = concat %f, %n {axis = 1}
  %b = ifelse %c {
    %y = neg %x
    yield %y
  } else {
    yield %r
  }
  return %p, %u, %q, %b, %f, %k, %j, %r
}
"#;

    fn func() -> Func {
        crate::ir::text::parse("t.kir", ALL_KINDS)
            .unwrap()
            .remove(0)
    }

    #[test]
    fn every_kind_of_step_prints_and_parses_back_to_the_same_plan() {
        let f = func();
        for opts in [LowerOptions::default(), LowerOptions::all()] {
            let plan = lower_with(&f, opts);
            let text = plan.to_string();
            let mut back = parse_plan("t", &text, &f).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back.to_string(), text);
            back.serial = plan.serial;
            assert_eq!(format!("{back:?}"), format!("{plan:?}"), "{text}");
        }
        let text = lower_with(&f, LowerOptions::all()).to_string();
        for part in [
            "= rows 8 ",
            " roles (rows, inner 0)",
            " update %2 scale 0.5 inplace 2",
            "gemm %0^T, %1",
            " stretch elementwise (0, 0)",
            "= view slice %0 [0[::-1], 1]",
            "= map cast %",
            "{to = i32} {%0 = input 0 : f32",
            "perform const [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]",
            "perform uniform {seed = 7",
            "perform concat %",
            "} else {",
            "reduce max axes [1] keepdims",
        ] {
            assert!(text.contains(part), "`{part}` not in\n{text}");
        }
    }

    #[test]
    fn damaged_plans_are_errors_not_panics() {
        let f = func();
        let text = lower_with(&f, LowerOptions::all()).to_string();
        let chars: Vec<char> = text.chars().collect();
        let mut parsed = 0;
        for at in (0..chars.len()).step_by(3) {
            let cut: String = chars[..at].iter().collect();
            let dropped: String = chars
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != at)
                .map(|(_, c)| c)
                .collect();
            let swapped: String = chars
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    if i == at {
                        ['1', '%', '{', ']', 'é'][at % 5]
                    } else {
                        c
                    }
                })
                .collect();
            for src in [cut, dropped, swapped] {
                parsed += usize::from(parse_plan("t", &src, &f).is_ok());
            }
        }
        // Some damage is harmless (a space, a digit of a dim nobody checks): most is not.
        assert!(parsed < chars.len() / 3, "{parsed} damaged plans parsed");
    }

    #[test]
    fn bad_plans_are_errors_with_their_place() {
        let f = func();
        let text = lower_with(&f, LowerOptions::all()).to_string();
        let err = |src: &str| match parse_plan("t", src, &f) {
            Ok(p) => panic!("parsed:\n{p}"),
            Err(e) => e.to_string(),
        };
        let cases = [
            (
                text.replace("acc f32 from -inf", "acc f64 from -inf"),
                "max of f32 is `acc f32",
            ),
            (
                text.replace("= view slice %0 [0[::-1], 1]", "= view slice %0 [1, 0]"),
                "slice of rank 2 is not the view [1, 0]",
            ),
            (
                text.replace(
                    "= view slice %0 [0[::-1], 1]",
                    "= view transpose %0 [0[::-1], 1]",
                ),
                "`transpose` gives no view",
            ),
            (
                text.replace("gemm %0^T, %1", "gemm %0^T, %99"),
                "%99 is not a value of @f",
            ),
            (
                text.replace("= rows 8 ", "= lines 8 "),
                "unknown step kind `lines`",
            ),
            (
                text.replace(" roles (inner 2, inner 3)", " roles (inner 2)"),
                "roles do not fit",
            ),
            (text.replace("return", "yield"), "expected"),
            (text.replace("plan @f(", "plan @g("), "the plan is of @g"),
            (format!("{text} extra"), "unexpected text after the plan"),
            ("plan @f(%0".to_string(), "expected"),
            (String::new(), "expected `plan`"),
        ];
        for (src, want) in cases {
            assert_ne!(src, text, "the edit for `{want}` changed nothing");
            let e = err(&src);
            assert!(e.contains(want), "`{want}` not in `{e}`");
        }
    }
}
