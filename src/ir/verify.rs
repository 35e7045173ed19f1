//! The verifier: checks that a function is well formed, whoever built it (the parser, the
//! graph, a pass). Values are defined once and before use (a region sees what is defined before
//! it; what it defines stays inside), instruction types match inference, attributes are in
//! range (inference checks them), and the outputs are defined. All problems are reported.

use super::infer::{infer_ifelse, infer_scan, scan_param_types};
use super::{infer, Func, Inst, Op, Value};

/// Regions (`ifelse` branches) nest at most this deep. Every stage walks regions by recursion,
/// one call per level, so the limit keeps a hostile or generated program from overflowing the
/// stack; the text form's parser and the graph's compile both meet it here.
pub const MAX_REGION_DEPTH: usize = 64;

/// Checks that `f` is well formed (see the module's description); every problem found, one
/// message each, naming the function.
pub fn verify(f: &Func) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let n = f.values.len();
    let mut defined = vec![false; n];
    let mut visible = vec![false; n];
    let name = |v: Value| match f.values.get(v.index()).and_then(|d| d.name.as_deref()) {
        Some(s) => format!("%{s}"),
        None => format!("value #{}", v.0),
    };
    for &p in &f.params {
        if p.index() >= n {
            errs.push(format!("@{}: parameter {} does not exist", f.name, p.0));
            continue;
        }
        if std::mem::replace(&mut defined[p.index()], true) {
            errs.push(format!("@{}: {} is defined twice", f.name, name(p)));
        }
        visible[p.index()] = true;
    }
    block(f, &f.body, 0, &mut defined, &mut visible, &mut errs, &name);
    for &o in &f.outputs {
        if o.index() >= n || !visible[o.index()] {
            errs.push(format!(
                "@{}: the output {} is not defined",
                f.name,
                name(o)
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

fn block(
    f: &Func,
    body: &[Inst],
    depth: usize,
    defined: &mut [bool],
    visible: &mut Vec<bool>,
    errs: &mut Vec<String>,
    name: &dyn Fn(Value) -> String,
) {
    let n = defined.len();
    for inst in body {
        let op = inst.op.display_name();
        let mut ok = true;
        for &a in &inst.args {
            if a.index() >= n || !visible[a.index()] {
                errs.push(format!(
                    "@{}: {op} uses {} before it is defined",
                    f.name,
                    name(a)
                ));
                ok = false;
            }
        }
        let mut region_types = Vec::new();
        if !inst.regions.is_empty() && depth == MAX_REGION_DEPTH {
            errs.push(format!(
                "@{}: {op} nests regions deeper than {MAX_REGION_DEPTH}",
                f.name
            ));
            continue;
        }
        if let (Op::Scan { carries, .. }, true) = (&inst.op, ok) {
            let [r] = inst.regions.as_slice() else {
                errs.push(format!("@{}: scan needs one region", f.name));
                continue;
            };
            let arg_tys: Vec<_> = inst.args.iter().map(|&a| f.ty(a)).collect();
            match scan_param_types(*carries, &arg_tys) {
                Ok(tys) if tys.len() == r.params.len() => {
                    for (&p, t) in r.params.iter().zip(&tys) {
                        if p.index() < n && f.ty(p) != t {
                            errs.push(format!(
                                "@{}: scan parameter {} is typed {} but its argument makes it {t}",
                                f.name,
                                name(p),
                                f.ty(p)
                            ));
                        }
                    }
                }
                Ok(tys) => errs.push(format!(
                    "@{}: scan's region takes {} parameters where its arguments give {}",
                    f.name,
                    r.params.len(),
                    tys.len()
                )),
                Err(e) => errs.push(format!("@{}: {e}", f.name)),
            }
        } else if inst.regions.iter().any(|r| !r.params.is_empty()) {
            errs.push(format!("@{}: {op}'s regions take no parameters", f.name));
        }
        for r in &inst.regions {
            // What a region defines is visible inside it only.
            let saved = visible.clone();
            for &p in &r.params {
                if p.index() >= n {
                    errs.push(format!("@{}: a region parameter does not exist", f.name));
                    ok = false;
                } else if std::mem::replace(&mut defined[p.index()], true) {
                    errs.push(format!("@{}: {} is defined twice", f.name, name(p)));
                    ok = false;
                } else {
                    visible[p.index()] = true;
                }
            }
            block(f, &r.body, depth + 1, defined, visible, errs, name);
            for &y in &r.yields {
                if y.index() >= n || !visible[y.index()] {
                    errs.push(format!(
                        "@{}: {op} yields {} which is not defined",
                        f.name,
                        name(y)
                    ));
                    ok = false;
                }
            }
            region_types.push(
                r.yields
                    .iter()
                    .filter(|y| y.index() < n)
                    .map(|&y| f.ty(y).clone())
                    .collect::<Vec<_>>(),
            );
            *visible = saved;
        }
        for &r in &inst.results {
            if r.index() >= n {
                errs.push(format!(
                    "@{}: {op} defines a value that does not exist",
                    f.name
                ));
                ok = false;
            } else if std::mem::replace(&mut defined[r.index()], true) {
                errs.push(format!("@{}: {} is defined twice", f.name, name(r)));
                ok = false;
            }
        }
        if ok {
            let arg_tys: Vec<_> = inst.args.iter().map(|&a| f.ty(a)).collect();
            let expected = match &inst.op {
                Op::IfElse if inst.regions.len() == 2 && arg_tys.len() == 1 => {
                    infer_ifelse(arg_tys[0], &region_types[0], &region_types[1])
                }
                Op::IfElse => Err("ifelse needs one condition and two regions".into()),
                Op::Scan { carries, .. } if inst.regions.len() == 1 => {
                    infer_scan(*carries, &arg_tys, &region_types[0])
                }
                op => infer(op, &arg_tys),
            };
            let got: Vec<_> = inst.results.iter().map(|&r| f.ty(r).clone()).collect();
            match expected {
                Ok(t) if t != got => errs.push(format!(
                    "@{}: {op} gives {} but its results are typed {}",
                    f.name,
                    t.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    got.iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Ok(_) => {}
                Err(e) => errs.push(format!("@{}: {op}: {e}", f.name)),
            }
        }
        for &r in &inst.results {
            if r.index() < n {
                visible[r.index()] = true;
            }
        }
    }
}
