//! The parser of the text form. It builds functions through type inference, so a parsed
//! function is well typed; a written `: TYPE` is checked against what inference gives. Errors
//! name the file, line and column; type errors of several instructions are reported together.

use super::attrs::{build_op, parse_float, Attr, Attrs};
use super::lexer::{lex, Tok, Token};
use crate::error::Error;
use crate::ir::infer::{infer_ifelse, infer_scan, scan_param_types};
use crate::ir::{infer, DType, Func, Inst, Op, Region, TensorType, Value};
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};
use std::collections::HashMap;

/// A parse or verification error at a place in the source.
#[derive(Clone, Debug, PartialEq)]
pub struct ParseError {
    /// The line, counted from 1.
    pub line: usize,
    /// The column, in characters, counted from 1.
    pub col: usize,
    /// What is wrong.
    pub msg: String,
}

impl ParseError {
    /// The error as kiln's `Error::Parse`, naming the source `file`.
    pub fn into_error(self, file: &str) -> Error {
        Error::Parse {
            file: file.to_string(),
            line: self.line,
            col: self.col,
            msg: self.msg,
        }
    }
}

type PResult<T> = Result<T, ParseError>;

/// Parses every function of `src`.
pub fn parse_funcs(src: &str) -> Result<Vec<Func>, Vec<ParseError>> {
    let toks = lex(src).map_err(|(line, col, msg)| vec![ParseError { line, col, msg }])?;
    let mut p = Parser::new(toks);
    let mut funcs = Vec::new();
    // Where each function starts, for an error about the function as a whole.
    let mut starts = Vec::new();
    while p.peek() != &Tok::Eof {
        let start = p.here();
        match p.func() {
            Ok(f) => {
                funcs.push(f);
                starts.push(start);
            }
            Err(e) => {
                p.errors.push(e);
                return Err(p.errors);
            }
        }
    }
    if !p.errors.is_empty() {
        return Err(p.errors);
    }
    if funcs.is_empty() {
        return Err(vec![ParseError {
            line: 1,
            col: 1,
            msg: "no function found (expected `func @name(...)`)".into(),
        }]);
    }
    for (i, f) in funcs.iter().enumerate() {
        if let Some(first) = funcs[..i].iter().position(|g| g.name == f.name) {
            let ((line, col), (was, _)) = (starts[i], starts[first]);
            return Err(vec![ParseError {
                line,
                col,
                msg: format!(
                    "function @{} is defined twice (first at line {was})",
                    f.name
                ),
            }]);
        }
    }
    Ok(funcs)
}

/// Builds the op named `name` (with its string for `custom "NAME"`, `composite "NAME"` and
/// `fused_reduce "sum"`) from the attribute text `attrs` (`{axis = 0}`, or empty) for
/// arguments of types `args`: how the plan's text form (`lower::text`) reads a step's op.
pub fn parse_op(
    name: &str,
    custom: Option<&str>,
    attrs: &str,
    args: &[TensorType],
) -> Result<Op, String> {
    let items = if attrs.trim().is_empty() {
        Vec::new()
    } else {
        let toks = lex(attrs).map_err(|(_, _, msg)| msg)?;
        let mut p = Parser::new(toks);
        let items = p.attrs().map_err(|e| e.msg)?;
        if p.peek() != &Tok::Eof {
            return Err(format!("unexpected text after the attributes `{attrs}`"));
        }
        items
    };
    build_op(name, custom, args, Attrs { items })
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    /// Type errors found so far; parsing goes on after them where it can.
    errors: Vec<ParseError>,
    scopes: Vec<HashMap<String, Value>>,
    /// How deep the lists being parsed nest (constants and attributes).
    lists: usize,
}

/// Lists in a constant or attribute nest at most this deep (a constant of rank 32). The parser
/// descends one call per level, so a limit keeps hostile input from overflowing the stack.
pub const MAX_LIST_DEPTH: usize = 32;

impl Parser {
    fn new(toks: Vec<Token>) -> Parser {
        Parser {
            toks,
            pos: 0,
            errors: Vec::new(),
            scopes: Vec::new(),
            lists: 0,
        }
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }
    fn here(&self) -> (usize, usize) {
        let t = &self.toks[self.pos];
        (t.line, t.col)
    }
    fn err<T>(&self, msg: impl Into<String>) -> PResult<T> {
        let (line, col) = self.here();
        Err(ParseError {
            line,
            col,
            msg: msg.into(),
        })
    }
    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == &Tok::Punct(c) {
            self.next();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> PResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            self.err(format!("expected `{c}`, found {}", describe(self.peek())))
        }
    }
    fn keyword(&mut self, k: &str) -> PResult<()> {
        match self.peek() {
            Tok::Ident(s) if s == k => {
                self.next();
                Ok(())
            }
            t => self.err(format!("expected `{k}`, found {}", describe(t))),
        }
    }
    fn ident(&mut self) -> PResult<String> {
        match self.next() {
            Tok::Ident(s) => Ok(s),
            t => {
                self.pos -= 1;
                self.err(format!("expected a name, found {}", describe(&t)))
            }
        }
    }

    fn func(&mut self) -> PResult<Func> {
        self.keyword("func")?;
        let name = match self.next() {
            Tok::Func(n) => n,
            t => {
                self.pos -= 1;
                return self.err(format!("expected `@name`, found {}", describe(&t)));
            }
        };
        let mut f = Func::new(name);
        self.scopes = vec![HashMap::new()];
        self.expect('(')?;
        if !self.eat(')') {
            loop {
                let (name, line, col) = self.value_name()?;
                self.expect(':')?;
                let ty = self.ty()?;
                let v = f.add_param(ty, Some(name.clone()));
                self.define(name, v, line, col)?;
                if self.eat(')') {
                    break;
                }
                self.expect(',')?;
            }
        }
        if self.peek() != &Tok::Arrow {
            return self.err("expected `->` and the result types");
        }
        self.next();
        let rets = self.types()?;
        self.expect('{')?;
        f.body = self.block(&mut f, &["return"])?;
        self.keyword("return")?;
        let outs = self.value_list()?;
        if outs.len() != rets.len() {
            return self.err(format!(
                "@{} returns {} values but declares {} result types",
                f.name,
                outs.len(),
                rets.len()
            ));
        }
        for (i, (&o, t)) in outs.iter().zip(&rets).enumerate() {
            if f.ty(o) != t {
                return self.err(format!(
                    "result {i} of @{} is {} but the signature says {t}",
                    f.name,
                    f.ty(o)
                ));
            }
        }
        f.outputs = outs;
        self.expect('}')?;
        Ok(f)
    }

    fn value_name(&mut self) -> PResult<(String, usize, usize)> {
        let (line, col) = self.here();
        match self.next() {
            Tok::Value(n) => Ok((n, line, col)),
            t => {
                self.pos -= 1;
                self.err(format!("expected a value `%name`, found {}", describe(&t)))
            }
        }
    }

    fn define(&mut self, name: String, v: Value, line: usize, col: usize) -> PResult<()> {
        if self.scopes.iter().any(|s| s.contains_key(&name)) {
            return Err(ParseError {
                line,
                col,
                msg: format!("%{name} is defined twice"),
            });
        }
        self.scopes.last_mut().expect("a scope").insert(name, v);
        Ok(())
    }

    fn lookup(&mut self) -> PResult<Value> {
        let (name, line, col) = self.value_name()?;
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(&name).copied())
            .ok_or(ParseError {
                line,
                col,
                msg: format!("%{name} is used before it is defined"),
            })
    }

    fn value_list(&mut self) -> PResult<Vec<Value>> {
        let mut out = Vec::new();
        if !matches!(self.peek(), Tok::Value(_)) {
            return Ok(out);
        }
        loop {
            out.push(self.lookup()?);
            if !self.eat(',') {
                return Ok(out);
            }
        }
    }

    fn ty(&mut self) -> PResult<TensorType> {
        let name = self.ident()?;
        let dtype: DType = match name.parse() {
            Ok(d) => d,
            Err(e) => return self.err(e),
        };
        self.expect('[')?;
        let mut shape = Vec::new();
        if !self.eat(']') {
            loop {
                match self.next() {
                    Tok::Punct('?') => shape.push(None),
                    Tok::Number(n) => match n.parse::<usize>() {
                        Ok(d) => shape.push(Some(d)),
                        Err(_) => {
                            self.pos -= 1;
                            return self.err(format!("bad dim `{n}`"));
                        }
                    },
                    t => {
                        self.pos -= 1;
                        return self.err(format!("expected a dim or `?`, found {}", describe(&t)));
                    }
                }
                if self.eat(']') {
                    break;
                }
                self.expect(',')?;
            }
        }
        Ok(TensorType { dtype, shape })
    }

    /// `TYPE` or `(TYPE, TYPE, ...)`.
    fn types(&mut self) -> PResult<Vec<TensorType>> {
        if self.eat('(') {
            let mut out = Vec::new();
            if self.eat(')') {
                return Ok(out);
            }
            loop {
                out.push(self.ty()?);
                if self.eat(')') {
                    return Ok(out);
                }
                self.expect(',')?;
            }
        }
        Ok(vec![self.ty()?])
    }

    /// Instructions up to (not including) one of the `ends` keywords.
    fn block(&mut self, f: &mut Func, ends: &[&str]) -> PResult<Vec<Inst>> {
        let mut body = Vec::new();
        loop {
            match self.peek() {
                Tok::Ident(k) if ends.contains(&k.as_str()) => return Ok(body),
                Tok::Value(_) => body.push(self.inst(f)?),
                t => {
                    return self.err(format!(
                        "expected an instruction or `{}`, found {}",
                        ends[0],
                        describe(t)
                    ))
                }
            }
        }
    }

    /// Whether the tokens from here are `%a, %b, ... =`: the results of the next instruction.
    fn at_results(&self) -> bool {
        let mut k = 0;
        loop {
            if !matches!(self.peek_at(k), Tok::Value(_)) {
                return false;
            }
            match self.peek_at(k + 1) {
                Tok::Punct('=') => return true,
                Tok::Punct(',') => k += 2,
                _ => return false,
            }
        }
    }

    fn inst(&mut self, f: &mut Func) -> PResult<Inst> {
        let mut results = Vec::new();
        loop {
            results.push(self.value_name()?);
            if self.eat('=') {
                break;
            }
            self.expect(',')?;
        }
        let (line, col) = self.here();
        let opname = self.ident()?;
        let custom = match (opname.as_str(), self.peek().clone()) {
            ("custom" | "composite" | "fused_reduce", Tok::Str(s)) => {
                self.next();
                Some(s)
            }
            _ => None,
        };
        let mut inst = Inst {
            op: Op::IfElse,
            args: Vec::new(),
            results: Vec::new(),
            regions: Vec::new(),
            inplace: None,
        };
        let inferred: Result<Vec<TensorType>, String>;
        if opname == "const" {
            let lit = self.literal()?;
            self.expect(':')?;
            let ty = self.ty()?;
            let t = to_tensor(&lit, &ty).map_err(|msg| ParseError { line, col, msg })?;
            inferred = Ok(vec![t.ty()]);
            inst.op = Op::Const(t);
        } else {
            if matches!(self.peek(), Tok::Value(_)) && !self.at_results() {
                inst.args = self.value_list()?;
            }
            let arg_tys: Vec<TensorType> = inst.args.iter().map(|&a| f.ty(a).clone()).collect();
            if opname == "ifelse" {
                inst.regions.push(self.region(f)?);
                self.keyword("else")?;
                inst.regions.push(self.region(f)?);
                let yt = |r: &Region| {
                    r.yields
                        .iter()
                        .map(|&y| f.ty(y).clone())
                        .collect::<Vec<_>>()
                };
                inferred = match arg_tys.as_slice() {
                    [c] => infer_ifelse(c, &yt(&inst.regions[0]), &yt(&inst.regions[1])),
                    _ => Err("ifelse takes one condition".into()),
                };
            } else if opname == "scan" {
                let items = self.attrs()?;
                let (carries, reverse) =
                    super::attrs::scan_attrs(items).map_err(|msg| ParseError { line, col, msg })?;
                inst.op = Op::Scan { carries, reverse };
                let refs: Vec<&TensorType> = arg_tys.iter().collect();
                let want = scan_param_types(carries, &refs).map_err(|msg| ParseError {
                    line,
                    col,
                    msg,
                })?;
                let params = self.region_params()?;
                if params.len() != want.len() {
                    let msg = format!(
                        "scan's region takes {} parameters, its arguments give {}",
                        params.len(),
                        want.len()
                    );
                    return Err(ParseError { line, col, msg });
                }
                for ((name, l, c, ty), w) in params.iter().zip(&want) {
                    if ty != w {
                        return Err(ParseError {
                            line: *l,
                            col: *c,
                            msg: format!(
                                "scan parameter %{name} is typed {ty}, its argument makes it {w}"
                            ),
                        });
                    }
                }
                let r = self.region_with(f, params)?;
                let yt: Vec<TensorType> = r.yields.iter().map(|&y| f.ty(y).clone()).collect();
                inferred = infer_scan(carries, &refs, &yt);
                inst.regions.push(r);
            } else {
                let attrs = if self.peek() == &Tok::Punct('{') {
                    self.attrs()?
                } else {
                    Vec::new()
                };
                let mut attrs = Attrs { items: attrs };
                inst.inplace = attrs
                    .take_inplace()
                    .map_err(|msg| ParseError { line, col, msg })?;
                if let Some(k) = inst.inplace.filter(|&k| k >= inst.args.len()) {
                    let n = inst.args.len();
                    let msg = format!("`inplace = {k}` names no argument ({n} are given)");
                    return Err(ParseError { line, col, msg });
                }
                match build_op(&opname, custom.as_deref(), &arg_tys, attrs) {
                    Ok(op) => {
                        inferred = infer(&op, &arg_tys.iter().collect::<Vec<_>>());
                        inst.op = op;
                    }
                    Err(msg) => return Err(ParseError { line, col, msg }),
                }
            }
        }
        let declared = if self.eat(':') {
            Some(self.types()?)
        } else {
            None
        };
        let tys = match (inferred, declared) {
            (Ok(t), Some(d)) if t != d => {
                let show = |v: &[TensorType]| {
                    v.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                self.errors.push(ParseError {
                    line,
                    col,
                    msg: format!(
                        "{opname} gives {} but the instruction says {}",
                        show(&t),
                        show(&d)
                    ),
                });
                // The value has the type its op gives: uses of it are checked against that,
                // so one wrong annotation is one error, not a chain of follow-on ones.
                t
            }
            (Ok(t), _) => t,
            // With a declared type the parse goes on, so later errors are reported too.
            (Err(msg), Some(d)) => {
                self.errors.push(ParseError { line, col, msg });
                d
            }
            (Err(msg), None) => return Err(ParseError { line, col, msg }),
        };
        if tys.len() != results.len() {
            return Err(ParseError {
                line,
                col,
                msg: format!(
                    "{opname} gives {} results, {} are named",
                    tys.len(),
                    results.len()
                ),
            });
        }
        for ((name, l, c), ty) in results.into_iter().zip(tys) {
            let v = f.new_value(ty, Some(name.clone()));
            f.set_loc(v, format!("{line}:{col}"));
            self.define(name, v, l, c)?;
            inst.results.push(v);
        }
        Ok(inst)
    }

    fn region(&mut self, f: &mut Func) -> PResult<Region> {
        self.region_with(f, Vec::new())
    }

    /// `(%name: TYPE, ...)`: a region's parameters, not yet defined.
    fn region_params(&mut self) -> PResult<Vec<(String, usize, usize, TensorType)>> {
        self.expect('(')?;
        let mut out = Vec::new();
        if self.eat(')') {
            return Ok(out);
        }
        loop {
            let (name, line, col) = self.value_name()?;
            self.expect(':')?;
            out.push((name, line, col, self.ty()?));
            if self.eat(')') {
                return Ok(out);
            }
            self.expect(',')?;
        }
    }

    /// A region whose scope starts with `params` defined.
    fn region_with(
        &mut self,
        f: &mut Func,
        params: Vec<(String, usize, usize, TensorType)>,
    ) -> PResult<Region> {
        // The function's own scope, then one per enclosing region.
        if self.scopes.len() > crate::ir::verify::MAX_REGION_DEPTH {
            return self.err(format!(
                "regions nest at most {} deep",
                crate::ir::verify::MAX_REGION_DEPTH
            ));
        }
        self.expect('{')?;
        self.scopes.push(HashMap::new());
        let mut values = Vec::new();
        for (name, line, col, ty) in params {
            let v = f.new_value(ty, Some(name.clone()));
            f.set_loc(v, format!("{line}:{col}"));
            self.define(name, v, line, col)?;
            values.push(v);
        }
        let body = self.block(f, &["yield"])?;
        self.keyword("yield")?;
        let yields = self.value_list()?;
        self.scopes.pop();
        self.expect('}')?;
        Ok(Region {
            params: values,
            body,
            yields,
        })
    }

    fn attrs(&mut self) -> PResult<Vec<(String, Attr)>> {
        self.expect('{')?;
        let mut out: Vec<(String, Attr)> = Vec::new();
        if self.eat('}') {
            return Ok(out);
        }
        loop {
            let name = self.ident()?;
            if out.iter().any(|(n, _)| *n == name) {
                return self.err(format!("attribute `{name}` is given twice"));
            }
            self.expect('=')?;
            out.push((name, self.attr_value()?));
            if self.eat('}') {
                return Ok(out);
            }
            self.expect(',')?;
        }
    }

    fn attr_value(&mut self) -> PResult<Attr> {
        match self.next() {
            Tok::Number(n) => Ok(match n.parse::<i64>() {
                Ok(i) => Attr::Int(i),
                Err(_) if parse_float(&n).is_some() => Attr::Float(n),
                Err(_) => {
                    self.pos -= 1;
                    return self.err(format!("bad number `{n}`"));
                }
            }),
            Tok::Ident(s) => Ok(match s.as_str() {
                "true" => Attr::Bool(true),
                "false" => Attr::Bool(false),
                "null" => Attr::Null,
                _ => Attr::Ident(s),
            }),
            Tok::Str(s) => Ok(Attr::Str(s)),
            Tok::Punct('[') => {
                self.enter_list()?;
                let mut items = Vec::new();
                if self.eat(']') {
                    self.lists -= 1;
                    return Ok(Attr::List(items));
                }
                loop {
                    items.push(self.attr_value()?);
                    if self.eat(']') {
                        self.lists -= 1;
                        return Ok(Attr::List(items));
                    }
                    self.expect(',')?;
                }
            }
            t => {
                self.pos -= 1;
                self.err(format!(
                    "expected an attribute value, found {}",
                    describe(&t)
                ))
            }
        }
    }

    /// One more level of nested lists, or an error past `MAX_LIST_DEPTH` (at the `[`).
    fn enter_list(&mut self) -> PResult<()> {
        if self.lists == MAX_LIST_DEPTH {
            self.pos -= 1;
            return self.err(format!("lists nest at most {MAX_LIST_DEPTH} deep"));
        }
        self.lists += 1;
        Ok(())
    }

    /// A constant literal: a number, `true`/`false`, `nan`/`inf`, or nested lists of them.
    fn literal(&mut self) -> PResult<Lit> {
        match self.next() {
            Tok::Number(n) => Ok(Lit::Atom(n)),
            Tok::Ident(s) if matches!(s.as_str(), "true" | "false" | "nan" | "inf" | "NaN") => {
                Ok(Lit::Atom(s))
            }
            Tok::Punct('[') => {
                self.enter_list()?;
                let mut items = Vec::new();
                if self.eat(']') {
                    self.lists -= 1;
                    return Ok(Lit::List(items));
                }
                loop {
                    items.push(self.literal()?);
                    if self.eat(']') {
                        self.lists -= 1;
                        return Ok(Lit::List(items));
                    }
                    self.expect(',')?;
                }
            }
            t => {
                self.pos -= 1;
                self.err(format!("expected a constant, found {}", describe(&t)))
            }
        }
    }
}

/// Parses a literal (a number, `true`, nested lists...) as a tensor of type `ty`.
pub fn parse_literal(src: &str, ty: &TensorType) -> Result<Tensor, String> {
    let toks = lex(src).map_err(|(_, c, m)| format!("column {c}: {m}"))?;
    let mut p = Parser {
        toks,
        pos: 0,
        errors: Vec::new(),
        scopes: Vec::new(),
        lists: 0,
    };
    let lit = p.literal().map_err(|e| e.msg)?;
    if p.peek() != &Tok::Eof {
        return Err(format!(
            "unexpected {} after the literal",
            describe(p.peek())
        ));
    }
    to_tensor(&lit, ty)
}

/// A literal as written.
#[derive(Clone, Debug)]
pub enum Lit {
    Atom(String),
    List(Vec<Lit>),
}

/// The shape of a nested literal and its atoms in row-major order.
fn flatten(
    lit: &Lit,
    depth: usize,
    shape: &mut Vec<usize>,
    atoms: &mut Vec<String>,
) -> Result<(), String> {
    match lit {
        Lit::Atom(a) => {
            if depth != shape.len() {
                return Err("ragged constant: lists of different depths".into());
            }
            atoms.push(a.clone());
        }
        Lit::List(items) => {
            if depth == shape.len() {
                if atoms.is_empty() && shape.iter().all(|&d| d > 0) || depth == 0 {
                    shape.push(items.len());
                } else {
                    return Err("ragged constant: lists of different depths".into());
                }
            } else if shape[depth] != items.len() {
                return Err(format!(
                    "ragged constant: a list of {} where {} were expected",
                    items.len(),
                    shape[depth]
                ));
            }
            for it in items {
                flatten(it, depth + 1, shape, atoms)?;
            }
        }
    }
    Ok(())
}

/// The tensor of type `ty` that the literal writes.
pub fn to_tensor(lit: &Lit, ty: &TensorType) -> Result<Tensor, String> {
    let mut shape = Vec::new();
    let mut atoms = Vec::new();
    flatten(lit, 0, &mut shape, &mut atoms)?;
    // A list whose inner lists are empty has trailing dims the literal cannot show.
    if atoms.is_empty() && shape.len() < ty.rank() {
        shape.extend(ty.shape[shape.len()..].iter().map(|d| d.unwrap_or(0)));
    }
    if !ty.accepts_shape(&shape) {
        return Err(format!(
            "the constant has shape {shape:?} but its type is {ty}"
        ));
    }
    let bad = |a: &str| format!("`{a}` is not a {} value", ty.dtype);
    let sh = IxDyn(&shape);
    macro_rules! build {
        ($v:ident, $parse:expr) => {{
            let vals = atoms
                .iter()
                .map(|a| $parse(a.as_str()).ok_or_else(|| bad(a)))
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::$v(ArrayD::from_shape_vec(sh, vals).map_err(|e| e.to_string())?)
        }};
    }
    Ok(match ty.dtype {
        DType::Bool => build!(Bool, |a: &str| match a {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }),
        DType::I32 => build!(I32, |a: &str| a.parse::<i32>().ok()),
        DType::I64 => build!(I64, |a: &str| a.parse::<i64>().ok()),
        // Parsed as f32 directly, so the written digits round once.
        DType::F32 => build!(F32, |a: &str| parse_float(a).and_then(|f| {
            if f.is_nan() || f.is_infinite() {
                Some(f as f32)
            } else {
                a.parse::<f32>().ok()
            }
        })),
        DType::F64 => build!(F64, |a: &str| parse_float(a)),
        DType::F16 => build!(F16, |a: &str| parse_float(a).map(crate::ir::f16_of)),
        DType::BF16 => build!(BF16, |a: &str| parse_float(a).map(crate::ir::bf16_of)),
    })
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Value(v) => format!("`%{v}`"),
        Tok::Func(v) => format!("`@{v}`"),
        Tok::Ident(s) | Tok::Number(s) => format!("`{s}`"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Punct(c) => format!("`{c}`"),
        Tok::Arrow => "`->`".into(),
        Tok::Eof => "the end of the file".into(),
    }
}
