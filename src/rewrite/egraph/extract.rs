//! Extraction: one node per e-class, chosen by a cost that counts bytes moved and work done,
//! with a value the function needs in several places counted once (a DAG cost).
//!
//! It runs in two steps:
//!
//! 1. **Greedy, bottom up.** Each e-class gets the node of least *tree* cost (its own cost plus
//!    its arguments' best costs), found with Knuth's generalization of Dijkstra's algorithm: a
//!    class is settled when its cheapest node is the cheapest thing left, and a node is
//!    considered once all its arguments are settled. Each node's key (cost, then height) is
//!    larger than its arguments', so the choice is acyclic, and a cost that saturates (tree
//!    costs double with each level of sharing) still leaves heights to order it.
//! 2. **Refinement with sharing.** Tree costs count a shared argument once per use. The choice
//!    is then improved against the true DAG cost, the sum of the own costs of the classes the
//!    roots reach: for each class in use, each other node is tried by adding what it newly
//!    needs and dropping what nothing needs any longer (reference counts), and kept when the
//!    total goes down. A node whose arguments all have smaller keys cannot close a cycle while
//!    every choice is of that kind; any other is first checked by a search from its
//!    arguments. The work is bounded; the step is an improvement, never required.
//!
//! Nodes a stabilizing rule replaced cost so much that they are chosen only when nothing else
//! is possible.

use super::lang::*;
use crate::ir::{BinaryOp, Op, TensorType, UnaryOp};
use egg::{Id, Language};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Elements assumed for a dim that is unknown at compile time.
pub const UNKNOWN_DIM: f64 = 128.0;

/// The cost of a node a stabilizing rule replaced.
const AVOIDED: f64 = 1e20;

/// Costs saturate here (tree costs of deeply shared graphs grow exponentially).
const CAP: f64 = 1e250;

fn elems(t: &TensorType) -> f64 {
    t.shape
        .iter()
        .map(|d| d.map_or(UNKNOWN_DIM, |d| d as f64))
        .product()
}

fn bytes(t: &TensorType) -> f64 {
    elems(t) * t.dtype.size() as f64
}

/// Work per element of a unary op, in units of an add.
fn unary_work(u: UnaryOp) -> f64 {
    use UnaryOp::*;
    match u {
        Sqrt | Rsqrt | Reciprocal => 8.0,
        Exp | Log | Log1p | Expm1 | Sin | Cos | Tan | Tanh | Sigmoid | Erf => 40.0,
        _ => 1.0,
    }
}

fn binary_work(b: BinaryOp) -> f64 {
    use BinaryOp::*;
    match b {
        Div | FloorDiv | Mod => 8.0,
        Pow => 60.0,
        _ => 1.0,
    }
}

/// The cost of computing `node` once, its arguments given: the bytes it reads (each argument
/// once per use) and writes, plus the work it does. Views (transposes, reshapes, broadcasts,
/// slices) and constants cost 1; every node costs at least 1.
pub fn node_cost(eg: &KilnEGraph, node: &Node, out: &Ty) -> f64 {
    let arg_ty = |i: usize| eg[node.args[i]].data.ty();
    let read: f64 = (0..node.args.len()).filter_map(arg_ty).map(bytes).sum();
    let cost = match (node.head, out) {
        (Head::Param(_) | Head::Get(_), _) => 1.0,
        (Head::Tuple { .. }, Ty::Many(ts)) => 1e6 + read + ts.iter().map(bytes).sum::<f64>(),
        (Head::Op { op, .. }, Ty::One(t)) => {
            let (n, write) = (elems(t), bytes(t));
            match eg.analysis.ops.get(op) {
                Op::Const(_) => 1.0,
                Op::Transpose { .. }
                | Op::Reshape { .. }
                | Op::ExpandDims { .. }
                | Op::Squeeze { .. }
                | Op::BroadcastTo { .. }
                | Op::Slice { .. } => 1.0,
                Op::Zeros { .. } | Op::Ones { .. } | Op::Full { .. } | Op::Arange { .. } => {
                    write + n
                }
                Op::Random { .. } => write + 20.0 * n,
                Op::Unary(u) => read + write + n * unary_work(*u),
                Op::Binary(b) => read + write + n * binary_work(*b),
                Op::Select | Op::Cast { .. } => read + write + n,
                Op::Reduce { .. } => read + write + arg_ty(0).map_or(n, elems),
                Op::MatMul => {
                    let k = arg_ty(0)
                        .and_then(|a| a.shape.last().copied())
                        .map_or(UNKNOWN_DIM, |d| d.map_or(UNKNOWN_DIM, |d| d as f64));
                    read + write + 2.0 * n * k
                }
                Op::Concat { .. } | Op::Take { .. } | Op::ScatterAdd { .. } => read + write,
                Op::OneHot { .. } | Op::Cumsum { .. } | Op::Cumprod { .. } => read + write + n,
                Op::TakeAlongAxis { .. } | Op::ScatterSet { .. } => read + write + n,
                Op::CumprodGrad { .. } => read + write + 4.0 * n,
                // n log n comparisons, about.
                Op::Sort { .. } | Op::Argsort { .. } => read + write + 16.0 * n,
                // The windowed ops are never rewritten into anything else; their cost only
                // has to be of the right size beside the rest.
                Op::Conv2d(_)
                | Op::Conv2dGradImage { .. }
                | Op::Conv2dGradFilter { .. }
                | Op::Pool2d(_)
                | Op::Pool2dGrad(_) => read + write + 16.0 * n,
                Op::Composite { program, .. } | Op::FusedReduce { program, .. } => {
                    read + write + n * program.insts.len() as f64
                }
                Op::Custom(_) | Op::IfElse | Op::Scan { .. } => 1e6 + read + write,
            }
        }
        _ => unreachable!("a tuple node in a tensor class or the other way round"),
    };
    cost.max(1.0)
}

/// A key of the greedy step: the tree cost, then the height.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Key(f64, u32);

impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// The chosen node of every e-class that has one, and the DAG cost of what the roots need.
pub struct Selection {
    chosen: HashMap<Id, Node>,
    /// The DAG cost after the greedy step.
    pub greedy_cost: f64,
    /// The DAG cost after refinement (that of the chosen nodes).
    pub cost: f64,
}

impl Selection {
    /// The node chosen for e-class `c` (canonical).
    pub fn node(&self, c: Id) -> Option<&Node> {
        self.chosen.get(&c)
    }
}

/// The e-graph flattened: classes and nodes by dense index.
struct Flat {
    class_ids: Vec<Id>,
    /// Per class, its nodes' indices.
    class_nodes: Vec<Vec<usize>>,
    node_class: Vec<usize>,
    node_args: Vec<Vec<usize>>,
    own: Vec<f64>,
    avoided: Vec<bool>,
    nodes: Vec<Node>,
}

fn flatten(eg: &KilnEGraph) -> Flat {
    let class_ids: Vec<Id> = eg.classes().map(|c| c.id).collect();
    let dense: HashMap<Id, usize> = class_ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let avoid: HashSet<Node> = eg
        .analysis
        .avoid
        .iter()
        .map(|n| n.clone().map_children(|c| eg.find(c)))
        .collect();
    let nn = eg.total_number_of_nodes();
    let mut f = Flat {
        class_nodes: vec![Vec::new(); class_ids.len()],
        class_ids,
        node_class: Vec::with_capacity(nn),
        node_args: Vec::with_capacity(nn),
        own: Vec::with_capacity(nn),
        avoided: Vec::with_capacity(nn),
        nodes: Vec::with_capacity(nn),
    };
    for (ci, &c) in f.class_ids.iter().enumerate() {
        let class = &eg[c];
        for n in &class.nodes {
            let k = f.nodes.len();
            f.class_nodes[ci].push(k);
            f.node_class.push(ci);
            f.node_args
                .push(n.args.iter().map(|a| dense[&eg.find(*a)]).collect());
            let avoided = avoid.contains(n);
            let own = node_cost(eg, n, &class.data.ty);
            f.own.push(if avoided { AVOIDED + own } else { own });
            f.avoided.push(avoided);
            f.nodes.push(n.clone());
        }
    }
    f
}

/// Chooses a node for every e-class, minimizing the DAG cost of what `roots` need.
pub fn extract(eg: &KilnEGraph, roots: &[Id]) -> Selection {
    let f = flatten(eg);
    let (nc, nn) = (f.class_ids.len(), f.nodes.len());
    // 1. Greedy: Knuth's algorithm on tree costs.
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nc];
    let mut waiting: Vec<usize> = vec![0; nn];
    let mut heap: BinaryHeap<Reverse<(Key, usize)>> = BinaryHeap::new();
    let mut key: Vec<Option<Key>> = vec![None; nc];
    let mut choice: Vec<usize> = vec![usize::MAX; nc];
    let node_key = |n: usize, key: &[Option<Key>]| {
        let mut cost = f.own[n];
        let mut height = 0;
        for &a in &f.node_args[n] {
            let k = key[a].expect("arguments are settled");
            cost += k.0;
            height = height.max(k.1);
        }
        Key(cost.min(CAP), height + 1)
    };
    for (n, w) in waiting.iter_mut().enumerate() {
        *w = f.node_args[n].len();
        for &a in &f.node_args[n] {
            users[a].push(n);
        }
        if *w == 0 {
            heap.push(Reverse((node_key(n, &key), n)));
        }
    }
    while let Some(Reverse((k, n))) = heap.pop() {
        let c = f.node_class[n];
        if key[c].is_some() {
            continue;
        }
        key[c] = Some(k);
        choice[c] = n;
        for &u in &users[c] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                let uk = node_key(u, &key);
                heap.push(Reverse((uk, u)));
            }
        }
    }
    // 2. Refinement against the DAG cost, with reference counts of the classes in use.
    let root_idx: Vec<usize> = {
        let dense: HashMap<Id, usize> = f
            .class_ids
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, i))
            .collect();
        roots.iter().map(|r| dense[&eg.find(*r)]).collect()
    };
    let mut refs: Vec<u32> = vec![0; nc];
    let mut stack: Vec<usize> = Vec::new();
    let mut steps = 0usize;
    // Adds (or, with `sign` -1, removes) a use of each class in `from`, following the choices
    // into classes that gain their first use or lose their last; returns the cost change.
    let mut change =
        |from: &[usize], sign: i32, choice: &[usize], refs: &mut [u32], steps: &mut usize| {
            let mut delta = 0.0;
            stack.clear();
            stack.extend_from_slice(from);
            while let Some(c) = stack.pop() {
                *steps += 1;
                let n = choice[c];
                if sign > 0 {
                    refs[c] += 1;
                    if refs[c] == 1 {
                        delta += f.own[n];
                        stack.extend_from_slice(&f.node_args[n]);
                    }
                } else {
                    refs[c] -= 1;
                    if refs[c] == 0 {
                        delta -= f.own[n];
                        stack.extend_from_slice(&f.node_args[n]);
                    }
                }
            }
            delta
        };
    if root_idx.iter().any(|&r| key[r].is_none()) {
        // Nothing finite to extract for a root: cannot happen for e-classes of a function.
        return Selection {
            chosen: HashMap::default(),
            greedy_cost: f64::INFINITY,
            cost: f64::INFINITY,
        };
    }
    let mut total = change(&root_idx, 1, &choice, &mut refs, &mut steps);
    let greedy_cost = total;
    let budget = 40 * nn + 10_000;
    // Whether a class's choice has arguments of smaller keys only. While every choice does,
    // no choice can close a cycle; a choice that does not is checked by a search.
    let mut monotone: Vec<bool> = vec![true; nc];
    let mut n_not_monotone = 0usize;
    let mut seen: Vec<u32> = vec![0; nc];
    let mut generation = 0u32;
    let mut reaches = |from: &[usize], target: usize, choice: &[usize], steps: &mut usize| {
        generation += 1;
        let mut stack: Vec<usize> = from.to_vec();
        while let Some(c) = stack.pop() {
            *steps += 1;
            if c == target {
                return true;
            }
            if seen[c] != generation {
                seen[c] = generation;
                stack.extend_from_slice(&f.node_args[choice[c]]);
            }
        }
        false
    };
    let mut order: Vec<usize> = (0..nc).filter(|&c| key[c].is_some()).collect();
    order.sort_by(|&a, &b| key[b].cmp(&key[a]));
    'passes: for _ in 0..2 {
        let mut improved = false;
        for &c in &order {
            if refs[c] == 0 || f.class_nodes[c].len() < 2 {
                continue;
            }
            let kc = key[c].expect("ordered classes are settled");
            for &n2 in &f.class_nodes[c] {
                if steps > budget {
                    break 'passes;
                }
                let n1 = choice[c];
                let args = &f.node_args[n2];
                if n2 == n1 || f.avoided[n2] || args.iter().any(|&a| key[a].is_none()) {
                    continue;
                }
                let mono = args.iter().all(|&a| key[a].is_some_and(|ka| ka < kc));
                if (!mono || n_not_monotone > 0) && reaches(args, c, &choice, &mut steps) {
                    continue;
                }
                let mut delta = f.own[n2] - f.own[n1];
                delta += change(&f.node_args[n2], 1, &choice, &mut refs, &mut steps);
                delta += change(&f.node_args[n1], -1, &choice, &mut refs, &mut steps);
                if delta < -1e-9 * total.abs().max(1.0) {
                    choice[c] = n2;
                    total += delta;
                    improved = true;
                    if monotone[c] != mono {
                        monotone[c] = mono;
                        if mono {
                            n_not_monotone -= 1;
                        } else {
                            n_not_monotone += 1;
                        }
                    }
                } else {
                    change(&f.node_args[n1], 1, &choice, &mut refs, &mut steps);
                    change(&f.node_args[n2], -1, &choice, &mut refs, &mut steps);
                }
            }
        }
        if !improved {
            break;
        }
    }
    let chosen = (0..nc)
        .filter(|&c| choice[c] != usize::MAX)
        .map(|c| (f.class_ids[c], f.nodes[choice[c]].clone()))
        .collect();
    Selection {
        chosen,
        greedy_cost,
        cost: total,
    }
}
