//! Inside a row group, a member reads what an earlier map member computed instead of computing
//! it again.
//!
//! Fusion copies an elementwise producer into every consumer (outside a group that saves a
//! pass over memory): a softmax of `x * c + mask` becomes a map of `x * c + mask` (for the row
//! max) and a map of `exp(x * c + mask - max)`. In a row group the first map's block is in
//! cache already, and reading it is one load where recomputing it is two loads and two
//! operations; it also leaves the exponential's argument as "a value less a row constant",
//! which the host math hands to its shifted buffer function with no staging loop
//! (`codegen::clif::host_math`). So a member whose program contains an earlier map member's
//! whole program, over the same arguments read the same way, gets that member's result as a
//! new argument (`Role::Inner`) in place of the recomputation; arguments it then no longer
//! reads are dropped.
//!
//! The bits do not change: the earlier member's kernel stores the register the later program
//! would have computed by the same operations in the same dtype. Half-precision programs are
//! left alone (a stored f16 is rounded where a register might not be).

use super::access::Access;
use super::rows::Role;
use super::{Kernel, Step};
use crate::ir::scalar::{ScalarInst, ScalarOp, ScalarProgram};
use crate::ir::{Func, Op, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Rewrites the members of one group (with their roles) so that each reads the earlier map
/// members' results it would otherwise recompute. Linear in the group's size: each map
/// member's result is looked up by the expression it computes (a group may have thousands of
/// members).
pub(super) fn reuse_earlier_maps(func: &Func, members: &mut [Step], roles: &mut [Vec<Role>]) {
    // The nearest earlier map member computing each expression (keyed on its program as
    // fusion made it, which is the value it stores whether or not it was rewritten).
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for j in 0..members.len() {
        let own = result_key(func, &members[j]);
        // A member may contain several earlier members' expressions; each rewrite reads one.
        for _ in 0..MAX_REUSES {
            let found = program_parts(&members[j]).and_then(|(p, args, access, space)| {
                let keys = keys(p, args, access, space);
                // The largest expression first: registers from the last.
                (0..keys.len()).rev().find_map(|r| {
                    let i = *by_key.get(&keys[r])?;
                    let input = matches!(p.insts[r].op, ScalarOp::Input(_));
                    (!input).then_some((i, r))
                })
            });
            let Some((i, r)) = found else {
                break;
            };
            let (before, after) = members.split_at_mut(j);
            match reuse(func, &before[i], i, &after[0], &roles[j], r) {
                Some((step, step_roles)) => {
                    after[0] = step;
                    roles[j] = step_roles;
                }
                None => break,
            }
        }
        if let Some(key) = own {
            by_key.insert(key, j);
        }
    }
    free_at_last_reads(members);
}

/// How many earlier members' expressions one member may be rewritten to read.
const MAX_REUSES: usize = 4;

/// The key of what a map member stores, where later members may read it instead: a map of
/// one result that is not one of its inputs, in full precision.
fn result_key(func: &Func, step: &Step) -> Option<String> {
    let Kernel::Map {
        program,
        space,
        access,
    } = &step.kernel
    else {
        return None;
    };
    let out = *program.outputs.first()?;
    let stored = func.ty(step.results[0]);
    let usable = program.outputs.len() == 1
        && step.results.len() == 1
        && stored.shape.len() == space.len()
        && !matches!(program.insts[out].op, ScalarOp::Input(_))
        && !program.insts.iter().any(|inst| inst.dtype.is_half());
    usable.then(|| keys(program, &step.args, access, space).swap_remove(out))
}

/// A map's or a reduction's program, arguments, accesses and index space.
type Parts<'s> = (
    &'s ScalarProgram,
    &'s [Value],
    &'s [Access],
    &'s [crate::ir::Dim],
);

/// The [`Parts`] of a map or a reduction.
fn program_parts(step: &Step) -> Option<Parts<'_>> {
    match &step.kernel {
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
        } => Some((program, &step.args, access, space)),
        _ => None,
    }
}

/// Moves each member result's free to the member that now reads it last (a reused result is
/// read later than before), where the members run one by one (a group too small to split).
fn free_at_last_reads(members: &mut [Step]) {
    let defined: HashMap<Value, usize> = (members.iter().enumerate())
        .map(|(k, s)| (s.results[0], k))
        .collect();
    let mut last_read: HashMap<Value, usize> = HashMap::new();
    for (k, m) in members.iter().enumerate() {
        for &a in &m.args {
            if defined.contains_key(&a) {
                last_read.insert(a, k);
            }
        }
    }
    let mut freed: Vec<(Value, usize)> = Vec::new();
    for (k, m) in members.iter_mut().enumerate() {
        m.frees.retain(|v| {
            let inner = defined.contains_key(v);
            if inner {
                freed.push((*v, k));
            }
            !inner
        });
    }
    for (v, at) in freed {
        let last = last_read.get(&v).copied().unwrap_or(at);
        members[last].frees.push(v);
    }
}

/// `later` (with `roles`) reading member `i`'s result (`earlier`) in place of its register
/// `r`, which computes what `earlier` stores; `None` where the rewrite does not apply.
fn reuse(
    func: &Func,
    earlier: &Step,
    i: usize,
    later: &Step,
    roles: &[Role],
    r: usize,
) -> Option<(Step, Vec<Role>)> {
    let (p_j, _, access_j, space_j) = program_parts(later)?;
    let result = earlier.results[0];
    // No argument positions that other parts of the step refer to (stretch checks); no half
    // precision; the stored result of the frame's rank (`result_key` checked the rest).
    if later.stretch.is_some()
        || func.ty(result).shape.len() != space_j.len()
        || p_j.insts.iter().any(|inst| inst.dtype.is_half())
    {
        return None;
    }
    // The program with register `r` read from a new last input, dead registers dropped and
    // the inputs left unread removed.
    let n_args = later.args.len();
    let mut insts = p_j.insts.clone();
    insts[r] = ScalarInst {
        op: ScalarOp::Input(n_args),
        args: vec![],
        dtype: p_j.insts[r].dtype,
    };
    let program = ScalarProgram {
        insts,
        outputs: p_j.outputs.clone(),
    };
    let mut args = later.args.clone();
    args.push(result);
    let mut access = access_j.to_vec();
    access.push(Access::of(space_j.len(), func.ty(result)));
    let mut new_roles = roles.to_vec();
    new_roles.push(Role::Inner(i));
    let (program, kept) = compact(&program, n_args + 1);
    let args: Vec<Value> = kept.iter().map(|&k| args[k]).collect();
    let access: Vec<Access> = kept.iter().map(|&k| access[k].clone()).collect();
    let new_roles: Vec<Role> = kept.iter().map(|&k| new_roles[k]).collect();
    let program = Arc::new(program);
    let mut step = later.clone();
    step.inplace = later
        .inplace
        .and_then(|k| kept.iter().position(|&x| x == k));
    step.args = args;
    match &mut step.kernel {
        Kernel::Map {
            program: p,
            access: a,
            ..
        } => {
            *p = program.clone();
            *a = access;
            step.op = Op::Composite {
                name: composite_name(&later.op),
                program,
            };
        }
        Kernel::Reduce {
            program: p,
            access: a,
            fused,
            op,
            axes,
            keepdims,
            ..
        } => {
            *p = program.clone();
            *a = access;
            *fused = !is_identity(&program);
            step.op = match *fused {
                true => Op::FusedReduce {
                    op: *op,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                    program,
                },
                false => Op::Reduce {
                    op: *op,
                    axes: axes.clone(),
                    keepdims: *keepdims,
                },
            };
        }
        _ => unreachable!("matched above"),
    }
    Some((step, new_roles))
}

/// The name a rewritten map's op keeps.
fn composite_name(op: &Op) -> String {
    match op {
        Op::Composite { name, .. } => name.clone(),
        _ => "fused".into(),
    }
}

/// Whether `program` only passes its one input through.
fn is_identity(program: &ScalarProgram) -> bool {
    program.outputs.len() == 1
        && matches!(program.insts[program.outputs[0]].op, ScalarOp::Input(0))
        && program.insts.len() == 1
}

/// A canonical key per register: the expression it computes, with each input named by the
/// value it reads and how it reads it over the index space.
fn keys(
    program: &ScalarProgram,
    args: &[Value],
    access: &[Access],
    space: &[crate::ir::Dim],
) -> Vec<String> {
    // The index space is part of every input's key: reads compare only over the same one.
    let space = format!("{space:?}");
    let mut out: Vec<String> = Vec::with_capacity(program.insts.len());
    for inst in &program.insts {
        let key = match &inst.op {
            ScalarOp::Input(k) => match (args.get(*k), access.get(*k)) {
                (Some(v), Some(a)) => format!("in({v}, {:?} of {space})", a.axes),
                // An input without an argument matches nothing.
                _ => format!("unmatched{}", out.len()),
            },
            op => {
                let parts: Vec<&str> = inst.args.iter().map(|&a| out[a].as_str()).collect();
                format!("{op:?}({})", parts.join(", "))
            }
        };
        out.push(format!("{key}: {:?}", inst.dtype));
    }
    out
}

/// `program` without the registers its outputs do not need, and with only the inputs it still
/// reads (renumbered in order); also which of the `n_in` inputs were kept.
fn compact(program: &ScalarProgram, n_in: usize) -> (ScalarProgram, Vec<usize>) {
    let mut live = vec![false; program.insts.len()];
    for &o in &program.outputs {
        live[o] = true;
    }
    for r in (0..program.insts.len()).rev() {
        if live[r] {
            for &a in &program.insts[r].args {
                live[a] = true;
            }
        }
    }
    let read: Vec<bool> = (0..n_in)
        .map(|k| {
            (program.insts.iter().zip(&live)).any(|(inst, &l)| l && inst.op == ScalarOp::Input(k))
        })
        .collect();
    let kept: Vec<usize> = (0..n_in).filter(|&k| read[k]).collect();
    let renumber: HashMap<usize, usize> = kept.iter().enumerate().map(|(n, &k)| (k, n)).collect();
    let mut new_reg = vec![usize::MAX; program.insts.len()];
    let mut insts = Vec::new();
    for (r, inst) in program.insts.iter().enumerate() {
        if !live[r] {
            continue;
        }
        let op = match inst.op {
            ScalarOp::Input(k) => ScalarOp::Input(renumber[&k]),
            ref op => op.clone(),
        };
        new_reg[r] = insts.len();
        insts.push(ScalarInst {
            op,
            args: inst.args.iter().map(|&a| new_reg[a]).collect(),
            dtype: inst.dtype,
        });
    }
    let outputs = program.outputs.iter().map(|&o| new_reg[o]).collect();
    (ScalarProgram { insts, outputs }, kept)
}
