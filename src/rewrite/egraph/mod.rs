//! The e-graph pass (`egg`): an SSA function becomes an e-graph, rewrite rules run on it in
//! phases (canonicalize, stabilize, specialize), each with limits on nodes, iterations and
//! time, and extraction with a cost model that counts bytes moved and work done, shared values
//! once, turns it back into an SSA function.
//!
//! - **Merging** is hash-consing: equal ops on equal arguments are one node, constants with
//!   equal contents one constant.
//! - **Folding** is the analysis: a node whose arguments are constants is computed with the
//!   op's own `perform` (results up to [`MAX_FOLDED`] elements), and its e-class gets the
//!   constant, which extraction prefers.
//! - **Rules** ([`rules`]) add equal terms to e-classes; nothing is lost, extraction
//!   ([`extract`]) chooses.
//! - **Opaque ops.** An `ifelse` is a node of its own (it never merges with another) whose
//!   arguments are its condition and the values its regions read; the regions are optimized
//!   each as a function of those values, before, and copied back when the `ifelse` is written
//!   out. Random ops merge when equal (their numbers are a function of their parameters) but
//!   never fold; custom ops never fold, merge only without state or their own random stream,
//!   and always stay, read or not.
//!
//! Values keep their names: an e-class is written out as the first original value in it, so
//! `%t = transpose %x` stays `%t` whatever the rules made of it.

pub mod extract;
pub mod lang;
pub mod rules;

pub use lang::{MAX_FOLDED, MAX_FOLD_INPUT};
pub use rules::Phase;

use crate::ir::{Func, Inst, Op, Region, Value};
use crate::tensor::Tensor;
use egg::{Id, Language, Runner, SimpleScheduler, StopReason};
use lang::{family, mergeable, Head, KilnAnalysis, KilnEGraph, Node, Ty};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// Limits of one run of the rules. Each phase stops at the first it reaches, keeping what it
/// found so far: the pass degrades to fewer rewrites, never to a hang.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Iterations per phase (an iteration searches every rule once, then applies them).
    pub iterations: usize,
    /// E-nodes in all, as a multiple of the function's instructions (at least `min_nodes`).
    pub nodes_per_inst: usize,
    /// The fewest e-nodes allowed, whatever the function's size.
    pub min_nodes: usize,
    /// Time for all phases together (regions included).
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            iterations: 12,
            nodes_per_inst: 8,
            min_nodes: 10_000,
            time: Duration::from_millis(500),
        }
    }
}

/// Options of the e-graph pass.
#[derive(Clone, Debug)]
pub struct Options {
    /// Fold constants (on by default).
    pub fold: bool,
    /// Also run rules that change NaN or inf results (`x * 0 -> 0`); off by default.
    pub fast_math: bool,
    /// Limits on each phase's iterations and e-nodes, and on the whole pass's time.
    pub limits: Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fold: true,
            fast_math: false,
            limits: Limits::default(),
        }
    }
}

/// What one phase did.
#[derive(Clone, Debug)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// Iterations run.
    pub iterations: usize,
    /// Why it stopped (`saturated`, `iteration limit (12)`, `node limit (..)`, ...).
    pub stop: String,
    /// E-nodes in the e-graph at the end of the phase.
    pub nodes: usize,
    /// E-classes in the e-graph at the end of the phase.
    pub classes: usize,
    /// How often each rule was applied (rules that never were are left out).
    pub applied: Vec<(String, usize)>,
    /// The phase's wall-clock time.
    pub time: Duration,
}

/// What the pass did: the phases, then extraction.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Instructions of the function before the pass (regions' included).
    pub insts_in: usize,
    /// Instructions of the function after the pass (regions' included).
    pub insts_out: usize,
    /// What each phase of the top-level body did, in order.
    pub phases: Vec<PhaseReport>,
    /// The DAG cost of the greedy choice.
    pub greedy_cost: f64,
    /// The DAG cost after refinement: that of the function written back.
    pub cost: f64,
    /// Time to build the e-graph (folding included).
    pub build_time: Duration,
    /// Time to extract and write the function back.
    pub extract_time: Duration,
    /// Time of the whole pass.
    pub time: Duration,
}

impl fmt::Display for Report {
    /// The report as comments of the text form, to stand above the function in a dump.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        writeln!(
            f,
            "; egraph: {} instructions in, {} out, {:.2} ms (build {:.2} ms)",
            self.insts_in,
            self.insts_out,
            ms(self.time),
            ms(self.build_time),
        )?;
        for p in &self.phases {
            let applied: Vec<String> = p.applied.iter().map(|(r, n)| format!("{r} x{n}")).collect();
            writeln!(
                f,
                "; phase {}: {} iterations, {}; {} e-nodes, {} e-classes; {:.2} ms; applied: {}",
                p.phase.name(),
                p.iterations,
                p.stop,
                p.nodes,
                p.classes,
                p.time.as_secs_f64() * 1e3,
                if applied.is_empty() {
                    "none".to_string()
                } else {
                    applied.join(", ")
                }
            )?;
        }
        writeln!(
            f,
            "; extract: cost {:.4e} (greedy {:.4e}); {:.2} ms",
            self.cost,
            self.greedy_cost,
            ms(self.extract_time)
        )
    }
}

/// The e-graph pass alone, with default options.
pub fn simplify(func: &Func) -> Func {
    run(func, &Options::default()).0
}

/// Runs the e-graph pass on `func`: regions first, then the top-level body. The time limit is
/// for all of it, regions included.
pub fn run(func: &Func, options: &Options) -> (Func, Report) {
    run_owned(func.clone(), options)
}

/// [`run`] on a function it may consume.
pub fn run_owned(mut f: Func, options: &Options) -> (Func, Report) {
    let start = Instant::now();
    let deadline = start + options.limits.time;
    let insts_in = f.inst_count();
    if f.body.iter().any(|i| !i.regions.is_empty()) {
        let mut body = std::mem::take(&mut f.body);
        let consts: HashMap<Value, Tensor> = body
            .iter()
            .filter_map(|i| match &i.op {
                Op::Const(t) => Some((i.results[0], t.clone())),
                _ => None,
            })
            .collect();
        for inst in body.iter_mut() {
            for r in inst.regions.iter_mut() {
                let mut sub = options.clone();
                sub.limits.time = deadline.saturating_duration_since(Instant::now());
                optimize_region(&mut f, r, &consts, &sub);
            }
        }
        f.body = body;
    }
    let (out, mut report) = run_body(f, options, deadline);
    report.insts_in = insts_in;
    report.insts_out = out.inst_count();
    report.time = start.elapsed();
    (out, report)
}

/// Optimizes a region as a function of the values it reads from outside. The constants among
/// them (`consts`) are copied in, so that the region's rules see them. The value arena is
/// shared: the region's function starts as a copy of `f`'s arena and gives back the grown one.
fn optimize_region(
    f: &mut Func,
    r: &mut Region,
    consts: &HashMap<Value, Tensor>,
    options: &Options,
) {
    let mut copies: HashMap<Value, Value> = HashMap::default();
    let mut body = Vec::new();
    for v in super::free_values(r) {
        if let Some(t) = consts.get(&v) {
            let name = f.values[v.index()].name.clone();
            let c = f.new_value(t.ty(), name);
            copies.insert(v, c);
            body.push(Inst {
                op: Op::Const(t.clone()),
                args: vec![],
                results: vec![c],
                regions: vec![],
                inplace: None,
            });
        }
    }
    substitute(&mut r.body, &mut r.yields, &copies);
    body.append(&mut r.body);
    r.body = body;
    super::on_region(f, r, |sub| run_owned(sub, options).0);
}

/// An instruction with regions (`ifelse`, `scan`) kept aside while its node is in the e-graph.
struct Opaque {
    /// How many of the node's arguments are the instruction's own (the rest are `free`).
    n_args: usize,
    regions: Vec<Region>,
    /// The values its regions read, which are the node's arguments after its own.
    free: Vec<Value>,
}

/// The function as an e-graph.
struct Built {
    eg: KilnEGraph,
    class_of: HashMap<Value, Id>,
    opaque: HashMap<u32, Opaque>,
    /// E-classes that must be computed even if nothing reads them (custom ops).
    effects: Vec<Id>,
}

fn build(f: &Func, fold: bool) -> Built {
    let analysis = KilnAnalysis {
        param_types: f.params.iter().map(|&p| f.ty(p).clone()).collect(),
        fold,
        ..Default::default()
    };
    let mut eg = KilnEGraph::new(analysis);
    let mut class_of: HashMap<Value, Id> =
        HashMap::with_capacity_and_hasher(f.values.len(), Default::default());
    let mut opaque = HashMap::default();
    let mut effects = Vec::new();
    for (i, &p) in f.params.iter().enumerate() {
        class_of.insert(p, eg.add(Node::new(Head::Param(i as u32), &[])));
    }
    let mut next_tag = 1u32;
    for inst in &f.body {
        let mut args: Vec<Id> = inst.args.iter().map(|a| class_of[a]).collect();
        let op = eg.analysis.ops.intern_ref(&inst.op);
        let single = inst.results.len() == 1 && inst.regions.is_empty();
        if single && mergeable(&inst.op) {
            let id = eg.add(Node::new(
                Head::Op {
                    fam: family(&inst.op),
                    op,
                },
                &args,
            ));
            class_of.insert(inst.results[0], id);
            if matches!(inst.op, Op::Custom(_)) {
                effects.push(id);
            }
            continue;
        }
        let tag = if mergeable(&inst.op) && inst.regions.is_empty() {
            0
        } else {
            next_tag += 1;
            next_tag - 1
        };
        if !inst.regions.is_empty() {
            let mut free: Vec<Value> = Vec::new();
            for r in &inst.regions {
                for v in super::free_values(r) {
                    if !free.contains(&v) {
                        free.push(v);
                    }
                }
            }
            args.extend(free.iter().map(|v| class_of[v]));
            eg.analysis
                .tuple_types
                .insert(tag, inst.results.iter().map(|&r| f.ty(r).clone()).collect());
            opaque.insert(
                tag,
                Opaque {
                    n_args: inst.args.len(),
                    regions: inst.regions.clone(),
                    free,
                },
            );
        }
        let t = eg.add(Node::new(Head::Tuple { op, tag }, &args));
        for (i, &r) in inst.results.iter().enumerate() {
            class_of.insert(r, eg.add(Node::new(Head::Get(i as u32), &[t])));
        }
        if matches!(inst.op, Op::Custom(_)) {
            effects.push(t);
        }
    }
    eg.rebuild();
    Built {
        eg,
        class_of,
        opaque,
        effects,
    }
}

fn stop_text(s: &Option<StopReason>) -> String {
    match s {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(n)) => format!("iteration limit ({n})"),
        Some(StopReason::NodeLimit(n)) => format!("node limit ({n} e-nodes)"),
        Some(StopReason::TimeLimit(t)) => format!("time limit ({:.1} ms)", t * 1e3),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

/// The top-level body through the e-graph (regions already optimized).
fn run_body(mut f: Func, options: &Options, deadline: Instant) -> (Func, Report) {
    let t = Instant::now();
    let Built {
        mut eg,
        class_of,
        opaque,
        effects,
    } = build(&f, options.fold);
    let build_time = t.elapsed();
    let limits = &options.limits;
    let node_limit = (limits.nodes_per_inst * f.body.len()).max(limits.min_nodes);
    let mut by_phase: HashMap<&'static str, Vec<egg::Rewrite<Node, KilnAnalysis>>> =
        HashMap::default();
    for r in rules::all_rules(options.fast_math) {
        let (phase, rw) = rules::rewrite(r);
        by_phase.entry(phase.name()).or_default().push(rw);
    }
    let mut report = Report {
        build_time,
        ..Default::default()
    };
    for phase in Phase::ALL {
        let t = Instant::now();
        let rws = by_phase.remove(phase.name()).unwrap_or_default();
        let left = deadline.saturating_duration_since(t);
        let runner = Runner::<Node, KilnAnalysis>::new(KilnAnalysis::default())
            .with_egraph(eg)
            .with_scheduler(SimpleScheduler)
            .with_iter_limit(limits.iterations)
            .with_node_limit(node_limit)
            .with_time_limit(left)
            .run(&rws);
        let mut applied: Vec<(String, usize)> = Vec::new();
        for it in &runner.iterations {
            for (name, &n) in &it.applied {
                match applied.iter_mut().find(|(r, _)| r == name.as_str()) {
                    Some(e) => e.1 += n,
                    None => applied.push((name.to_string(), n)),
                }
            }
        }
        report.phases.push(PhaseReport {
            phase,
            iterations: runner.iterations.len(),
            stop: stop_text(&runner.stop_reason),
            nodes: runner.egraph.total_size(),
            classes: runner.egraph.number_of_classes(),
            applied,
            time: t.elapsed(),
        });
        eg = runner.egraph;
    }
    let mut roots: Vec<Id> = f.outputs.iter().map(|o| class_of[o]).collect();
    roots.extend(effects.iter().copied());
    let t = Instant::now();
    let sel = extract::extract(&eg, &roots);
    report.greedy_cost = sel.greedy_cost;
    report.cost = sel.cost;
    // Extraction left something without a choice, or a cycle: keep the function. (This is a
    // bug where it happens; debug builds say so.)
    let values = std::mem::take(&mut f.values);
    let out = match emit(&f, values, &eg, &sel, &class_of, &opaque, &roots) {
        Ok(out) => out,
        Err(values) => {
            debug_assert!(
                false,
                "the e-graph of @{} could not be written back",
                f.name
            );
            f.values = values;
            f
        }
    };
    report.extract_time = t.elapsed();
    (out, report)
}

/// Writes the chosen nodes out as an SSA function, in the order of the original instructions
/// where they are kept, new instructions just before their first reader.
/// `values` is `f`'s value arena, taken to grow; it comes back unchanged where the function
/// cannot be written.
fn emit(
    f: &Func,
    values: Vec<crate::ir::ValueData>,
    eg: &KilnEGraph,
    sel: &extract::Selection,
    class_of: &HashMap<Value, Id>,
    opaque: &HashMap<u32, Opaque>,
    roots: &[Id],
) -> Result<Func, Vec<crate::ir::ValueData>> {
    let mut out = Func {
        name: f.name.clone(),
        values,
        params: f.params.clone(),
        body: Vec::with_capacity(f.body.len()),
        outputs: Vec::new(),
    };
    let n_values = out.values.len();
    match write(f, &mut out, eg, sel, class_of, opaque, roots) {
        Some(()) => Ok(out),
        None => {
            out.values.truncate(n_values);
            Err(out.values)
        }
    }
}

fn write(
    f: &Func,
    out: &mut Func,
    eg: &KilnEGraph,
    sel: &extract::Selection,
    class_of: &HashMap<Value, Id>,
    opaque: &HashMap<u32, Opaque>,
    roots: &[Id],
) -> Option<()> {
    // The first original value of each e-class: the class is written out as that value.
    let n = f.body.len();
    let mut orig: HashMap<Id, Value> = HashMap::with_capacity_and_hasher(n, Default::default());
    for inst in &f.body {
        for r in &inst.results {
            orig.entry(eg.find(class_of[r])).or_insert(*r);
        }
    }
    let mut rep: HashMap<Id, Value> = HashMap::with_capacity_and_hasher(n, Default::default());
    let mut tuple_vals: HashMap<Id, Vec<Value>> = HashMap::default();
    // false: in progress, true: written
    let mut state: HashMap<Id, bool> = HashMap::with_capacity_and_hasher(n, Default::default());
    let mut order: Vec<Id> = Vec::new();
    for inst in &f.body {
        order.extend(inst.results.iter().map(|r| eg.find(class_of[r])));
    }
    // Only what the roots reach is written; original instructions in their order first.
    let mut needed: HashSet<Id> = HashSet::default();
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    while let Some(c) = stack.pop() {
        if needed.insert(c) {
            stack.extend(sel.node(c)?.args.iter().map(|&a| eg.find(a)));
        }
    }
    order.retain(|c| needed.contains(c));
    order.extend(roots.iter().map(|&r| eg.find(r)));
    for start in order {
        let mut stack: Vec<(Id, bool)> = vec![(start, false)];
        while let Some((c, expanded)) = stack.pop() {
            match state.get(&c) {
                Some(true) => continue,
                Some(false) if !expanded => return None, // a cycle
                _ => {}
            }
            let node = sel.node(c)?;
            if !expanded {
                state.insert(c, false);
                stack.push((c, true));
                for &a in node.args.iter().rev() {
                    let a = eg.find(a);
                    if state.get(&a) != Some(&true) {
                        stack.push((a, false));
                    }
                }
                continue;
            }
            // The values of the arguments (a tuple has none: its results are read by `get`).
            let args: Vec<Value> = match node.head {
                Head::Get(_) => vec![],
                _ => node
                    .args
                    .iter()
                    .map(|a| rep.get(&eg.find(*a)).copied())
                    .collect::<Option<_>>()?,
            };
            match node.head {
                Head::Param(i) => {
                    rep.insert(c, f.params[i as usize]);
                }
                Head::Get(i) => {
                    let v = tuple_vals.get(&eg.find(node.args[0]))?[i as usize];
                    rep.insert(c, v);
                }
                Head::Op { op, .. } => {
                    let Ty::One(ty) = &eg[c].data.ty else {
                        return None;
                    };
                    let v = match orig.remove(&c) {
                        Some(v) => v,
                        None => out.new_value(ty.clone(), None),
                    };
                    out.body.push(Inst {
                        op: eg.analysis.ops.get(op).clone(),
                        args,
                        results: vec![v],
                        regions: vec![],
                        inplace: None,
                    });
                    rep.insert(c, v);
                }
                Head::Tuple { op, tag } => {
                    let Ty::Many(tys) = &eg[c].data.ty else {
                        return None;
                    };
                    // A result keeps its original value when its e-class is written as this
                    // result.
                    let mut results = Vec::with_capacity(tys.len());
                    for (i, ty) in tys.iter().enumerate() {
                        let get = Node::new(Head::Get(i as u32), &[c]);
                        let g = eg.lookup(get.clone());
                        let keeps = g.filter(|&g| {
                            sel.node(g)
                                .is_some_and(|n| n.clone().map_children(|a| eg.find(a)) == get)
                        });
                        let v = match keeps.and_then(|g| orig.remove(&g)) {
                            Some(v) => v,
                            None => out.new_value(ty.clone(), None),
                        };
                        results.push(v);
                    }
                    let (args, regions) = match opaque.get(&tag) {
                        Some(o) => {
                            let map: HashMap<Value, Value> = o
                                .free
                                .iter()
                                .copied()
                                .zip(args[o.n_args..].iter().copied())
                                .collect();
                            let mut regions = o.regions.clone();
                            for r in regions.iter_mut() {
                                substitute(&mut r.body, &mut r.yields, &map);
                            }
                            (args[..o.n_args].to_vec(), regions)
                        }
                        None => (args, vec![]),
                    };
                    out.body.push(Inst {
                        op: eg.analysis.ops.get(op).clone(),
                        args,
                        results: results.clone(),
                        regions,
                        inplace: None,
                    });
                    tuple_vals.insert(c, results);
                }
            }
            state.insert(c, true);
        }
    }
    out.outputs = f
        .outputs
        .iter()
        .map(|o| rep.get(&eg.find(class_of[o])).copied())
        .collect::<Option<_>>()?;
    Some(())
}

/// Replaces values read in a region (and the regions inside it) by `map`.
fn substitute(body: &mut [Inst], yields: &mut [Value], map: &HashMap<Value, Value>) {
    let sub = |v: &mut Value| {
        if let Some(&s) = map.get(v) {
            *v = s;
        }
    };
    for inst in body.iter_mut() {
        inst.args.iter_mut().for_each(sub);
        for r in inst.regions.iter_mut() {
            substitute(&mut r.body, &mut r.yields, map);
        }
    }
    yields.iter_mut().for_each(sub);
}

#[cfg(test)]
mod tests;
