//! The first stage of compilation: clone the part of the user's graph that the chosen outputs
//! (and updates) need into a fresh SSA function. The graph is only read.

use super::{reachable_applies, ApplyId, Graph, GraphData, Var, VarId, VarKind};
use crate::error::{Error, Result};
use crate::ir::{Func, Inst, Op, Region, Value};
use std::collections::{HashMap, HashSet};

/// The SSA function of a graph, and which of its parameters are shared variables.
pub struct SsaFunction {
    /// Parameters: the explicit inputs first, then every shared variable used or updated.
    /// Outputs: the requested outputs first, then one value per update, in order.
    pub func: Func,
    /// For each shared parameter (in order after the explicit inputs), its variable.
    pub shared: Vec<Var>,
}

/// Builds the SSA function computing `outputs` and `updates` from `inputs`.
pub fn to_ssa(
    name: &str,
    inputs: &[Var],
    outputs: &[Var],
    updates: &[(Var, Var)],
) -> Result<SsaFunction> {
    let graph: Graph = match inputs
        .iter()
        .chain(outputs)
        .chain(updates.iter().map(|u| &u.0))
        .next()
    {
        Some(v) => v.graph().clone(),
        None => {
            return Ok(SsaFunction {
                func: Func::new(name),
                shared: vec![],
            })
        }
    };
    for v in inputs
        .iter()
        .chain(outputs)
        .chain(updates.iter().flat_map(|(a, b)| [a, b]))
    {
        if !v.graph().same(&graph) {
            return Err(Error::Input(format!(
                "{} belongs to another graph than the function's other variables",
                v.label()
            )));
        }
    }
    let g = graph.data();
    let roots: Vec<VarId> = outputs
        .iter()
        .chain(updates.iter().map(|u| &u.1))
        .map(|v| v.id())
        .collect();
    let applies = reachable_applies(&g, roots.iter().copied());

    // Every variable the function touches: inputs of needed applies and the roots themselves.
    let used = super::used_vars(&g, &roots, &applies);

    // Type errors recorded while building surface here, the earliest first.
    for &v in &used {
        if let VarKind::Poisoned(e) = &g.vars[v.0 as usize].kind {
            return Err(e.clone());
        }
    }

    let mut func = Func::new(name);
    let mut map: HashMap<VarId, Value> = HashMap::new();
    let data = |id: VarId| &g.vars[id.0 as usize];
    for v in inputs {
        if !matches!(data(v.id()).kind, VarKind::Input) {
            return Err(Error::Input(format!(
                "{} is given as a function input but is not an input variable (a shared variable, constant or computed value)",
                v.label()
            )));
        }
        if map.contains_key(&v.id()) {
            return Err(Error::Input(format!(
                "{} is given twice as a function input",
                v.label()
            )));
        }
        let d = data(v.id());
        map.insert(v.id(), func.add_param(d.ty.clone(), d.name.clone()));
    }
    // Shared variables: those read, then those only updated, each once.
    let mut shared = Vec::new();
    let update_targets = updates.iter().map(|u| u.0.id());
    for id in used.iter().copied().chain(update_targets) {
        if let VarKind::Shared(_) = data(id).kind {
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(id) {
                let d = data(id);
                e.insert(func.add_param(d.ty.clone(), d.name.clone()));
                shared.push(graph.var(id));
            }
        }
    }
    for &id in &used {
        match &data(id).kind {
            VarKind::Input if !map.contains_key(&id) => {
                return Err(Error::Input(format!(
                    "{} is needed to compute the outputs but is not among the function's inputs",
                    graph.var(id).label()
                )));
            }
            VarKind::Constant(t) => {
                let d = data(id);
                let v = func.new_value(d.ty.clone(), d.name.clone());
                func.body.push(Inst {
                    op: Op::Const(t.clone()),
                    args: vec![],
                    results: vec![v],
                    regions: vec![],
                    inplace: None,
                });
                map.insert(id, v);
            }
            _ => {}
        }
    }
    // Constants come first (they were emitted above), then the Applies.
    let rest = emit(&applies, &g, &mut func, &mut map, 0)?;
    func.body.extend(rest);
    func.outputs = roots
        .iter()
        .map(|r| lookup(&map, &g, *r))
        .collect::<Result<_>>()?;
    Ok(SsaFunction { func, shared })
}

fn lookup(map: &HashMap<VarId, Value>, g: &GraphData, v: VarId) -> Result<Value> {
    map.get(&v).copied().ok_or_else(|| {
        let name = g.vars[v.0 as usize]
            .name
            .clone()
            .map(|n| format!("`{n}`"))
            .unwrap_or_else(|| "a value".into());
        Error::Input(format!(
            "{name} built inside a region (an ifelse branch or a scan body) is used outside it"
        ))
    })
}

/// The instructions of `ids` (in creation order, so topological), with the Applies that an
/// `ifelse` among them owns emitted inside its regions instead.
fn emit(
    ids: &[ApplyId],
    g: &GraphData,
    func: &mut Func,
    map: &mut HashMap<VarId, Value>,
    depth: usize,
) -> Result<Vec<Inst>> {
    let owned: HashSet<u32> = ids
        .iter()
        .flat_map(|a| {
            g.applies[a.0 as usize]
                .regions
                .iter()
                .flat_map(|r| r.clone())
        })
        .collect();
    let mut body = Vec::new();
    for &a in ids {
        if owned.contains(&a.0) {
            continue;
        }
        let ad = &g.applies[a.0 as usize];
        let mut regions = Vec::new();
        if !ad.regions.is_empty() && depth == crate::ir::verify::MAX_REGION_DEPTH {
            return Err(Error::Input(format!(
                "{}: regions (ifelse branches, scan bodies) nest deeper than {}",
                ad.loc,
                crate::ir::verify::MAX_REGION_DEPTH
            )));
        }
        let args = if let (Op::Scan { .. }, [range]) = (&ad.op, ad.regions.as_slice()) {
            // Arguments, then the body with its parameters; it yields one value per result.
            let n_args = ad.params.len();
            let yields = &ad.inputs[n_args..n_args + ad.outputs.len()];
            let body = Body {
                ids,
                g,
                range,
                params: &ad.params,
                yields,
            };
            regions.push(body.emit(func, map, depth)?);
            ad.inputs[..n_args]
                .iter()
                .map(|&i| lookup(map, g, i))
                .collect::<Result<Vec<_>>>()?
        } else if ad.op == Op::IfElse {
            // The condition, then each branch yielding one value per result.
            let n = ad.outputs.len();
            for (k, range) in ad.regions.iter().enumerate() {
                let yields = &ad.inputs[1 + k * n..1 + (k + 1) * n];
                let body = Body {
                    ids,
                    g,
                    range,
                    params: &[],
                    yields,
                };
                regions.push(body.emit(func, map, depth)?);
            }
            vec![lookup(map, g, ad.inputs[0])?]
        } else {
            ad.inputs
                .iter()
                .map(|&i| lookup(map, g, i))
                .collect::<Result<Vec<_>>>()?
        };
        if super::gradient_stops::is_gradient_stop(&ad.op) {
            // Only the gradient sees it: its result is its input's value.
            map.insert(ad.outputs[0], args[0]);
            continue;
        }
        let results = ad
            .outputs
            .iter()
            .map(|&o| {
                let d = &g.vars[o.0 as usize];
                let v = func.new_value(d.ty.clone(), d.name.clone());
                func.set_loc(v, ad.loc.to_string());
                map.insert(o, v);
                v
            })
            .collect();
        body.push(Inst {
            op: ad.op.clone(),
            args,
            results,
            regions,
            inplace: None,
        });
    }
    Ok(body)
}

/// A region of an Apply to emit: its Applies (those of `ids` in `range`), its parameters and
/// what it yields.
struct Body<'a> {
    ids: &'a [ApplyId],
    g: &'a GraphData,
    range: &'a std::ops::Range<u32>,
    params: &'a [VarId],
    yields: &'a [VarId],
}

impl Body<'_> {
    /// The region, with fresh values for its parameters. What it defines stays inside it: the
    /// map forgets it afterwards, so a use outside is an error naming the value.
    fn emit(
        &self,
        func: &mut Func,
        map: &mut HashMap<VarId, Value>,
        depth: usize,
    ) -> Result<Region> {
        let params = (self.params.iter())
            .map(|&p| {
                let v = func.new_value(self.g.vars[p.0 as usize].ty.clone(), None);
                map.insert(p, v);
                v
            })
            .collect();
        // `ids` is in creation order and a region's Applies are a range of ids: a slice.
        let from = self.ids.partition_point(|x| x.0 < self.range.start);
        let to = self.ids.partition_point(|x| x.0 < self.range.end);
        let sub = &self.ids[from..to];
        let body = emit(sub, self.g, func, map, depth + 1)?;
        let yields = (self.yields.iter())
            .map(|&y| lookup(map, self.g, y))
            .collect::<Result<Vec<_>>>()?;
        // What the region defined (its parameters, its Applies' results) is forgotten: only
        // those keys, so that a chain of regions costs what it holds, not the map's size.
        for p in self.params {
            map.remove(p);
        }
        for a in sub {
            for o in &self.g.applies[a.0 as usize].outputs {
                map.remove(o);
            }
        }
        Ok(Region {
            params,
            body,
            yields,
        })
    }
}
