//! Row groups: consecutive map and reduce steps that are each independent from row to row
//! (a row softmax: max over the last axis, `exp(x - m)`, its sum, the division) run together
//! on blocks of rows, so that each block's intermediates stay in cache and the input is read
//! from memory once instead of once per pass.
//!
//! A step may join a group when every argument is one of:
//! - **rows**: a value whose rank is the step's frame rank (a map's result rank, a reduction's
//!   input rank) with the group's row count as its first dim: the block reads its rows;
//! - **whole**: a value of lower rank (numpy aligns it to the trailing dims) or whose first dim
//!   is 1: the same for every row, read whole;
//! - **inner**: the result of an earlier member, of the frame rank: the block's own rows.
//!
//! and its result has a fully known shape with the group's row count first; a reduction must
//! keep axis 0. The group is a step of kernel [`Kernel::Rows`] whose arguments are the values
//! it reads from outside, whose results are the members' results read after it (the others
//! never leave the block), and whose `frees` are the members' frees of outside values.

use super::{Kernel, Step};
use crate::ir::{Func, Value};
use std::collections::{HashMap, HashSet};

/// How a member step reads one argument (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The block's rows of a value with the group's row count first.
    Rows,
    /// The whole value, the same for every row (lower rank, or a first dim of 1).
    Whole,
    /// The result of member `j` of the same group.
    Inner(usize),
}

/// At least this many members with at least one reduction make a group: a lone map has
/// nothing to share its blocks with, and chains of maps are fused already.
const MIN_MEMBERS: usize = 2;

/// The steps of one block with its eligible runs replaced by row groups.
pub(super) fn group_rows(func: &Func, steps: Vec<Step>) -> Vec<Step> {
    let mut out = Vec::with_capacity(steps.len());
    let mut run = Run::default();
    let mut rows = 0;
    for step in steps {
        let fits = if run.steps.is_empty() {
            first_rows(func, &step).and_then(|r| roles_of(func, &step, r, &run).map(|x| (r, x)))
        } else {
            roles_of(func, &step, rows, &run).map(|x| (rows, x))
        };
        match fits {
            Some((r, step_roles)) => {
                rows = r;
                run.push(step, step_roles);
            }
            None => {
                flush(func, &mut run, rows, &mut out);
                // The step may start a new group.
                match first_rows(func, &step)
                    .and_then(|r| roles_of(func, &step, r, &run).map(|x| (r, x)))
                {
                    Some((r, step_roles)) => {
                        rows = r;
                        run.push(step, step_roles);
                    }
                    None => out.push(step),
                }
            }
        }
    }
    flush(func, &mut run, rows, &mut out);
    out
}

/// The members of the group being gathered, with their roles and where each one's result
/// is (looked up for every argument of every later member: a map, so that a long run stays
/// linear).
#[derive(Default)]
struct Run {
    steps: Vec<Step>,
    roles: Vec<Vec<Role>>,
    member_of: HashMap<Value, usize>,
}

impl Run {
    fn push(&mut self, step: Step, roles: Vec<Role>) {
        self.member_of.insert(step.results[0], self.steps.len());
        self.steps.push(step);
        self.roles.push(roles);
    }
}

/// Ends the current run: a group if it is worth one, else its steps as they are.
fn flush(func: &Func, run: &mut Run, rows: usize, out: &mut Vec<Step>) {
    let Run {
        steps: mut members,
        mut roles,
        ..
    } = std::mem::take(run);
    let has_reduce = members
        .iter()
        .any(|s| matches!(s.kernel, Kernel::Reduce { .. }));
    if members.len() < MIN_MEMBERS || !has_reduce {
        out.extend(members);
        return;
    }
    let defined: HashSet<Value> = members.iter().map(|s| s.results[0]).collect();
    let freed: HashSet<Value> = members
        .iter()
        .flat_map(|s| s.frees.iter().copied())
        .collect();
    // The values the members read from outside, before `row_reuse` drops the reads it makes
    // redundant: the group still takes (and frees) each.
    let mut args = Vec::new();
    let mut taken = HashSet::new();
    for s in &members {
        for &a in &s.args {
            if !defined.contains(&a) && taken.insert(a) {
                args.push(a);
            }
        }
    }
    super::row_reuse::reuse_earlier_maps(func, &mut members, &mut roles);
    let results = members
        .iter()
        .map(|s| s.results[0])
        .filter(|r| !freed.contains(r))
        .collect();
    let frees = members
        .iter()
        .flat_map(|s| s.frees.iter().copied())
        .filter(|v| !defined.contains(v))
        .collect();
    let op = members[0].op.clone();
    out.push(Step {
        id: super::StepId::UNNUMBERED,
        kernel: Kernel::Rows {
            rows,
            steps: members,
            roles,
        },
        op,
        args,
        results,
        inplace: None,
        frees,
        stretch: None,
    });
}

/// The row count of a step that may be a group member: its result's first dim.
fn first_rows(func: &Func, step: &Step) -> Option<usize> {
    let shape = func.ty(*step.results.first()?).known_shape()?;
    shape.first().copied().filter(|&r| r >= 2)
}

/// The roles of `step`'s arguments in a group of `rows` rows whose members so far are `run`,
/// or `None` when it cannot join.
fn roles_of(func: &Func, step: &Step, rows: usize, run: &Run) -> Option<Vec<Role>> {
    if step.results.len() != 1 {
        return None;
    }
    let result = func.ty(step.results[0]).known_shape()?;
    if result.first() != Some(&rows) {
        return None;
    }
    let frame = match &step.kernel {
        Kernel::Map { .. } => result.len(),
        // A fused reduction's frame is its arguments' broadcast shape.
        Kernel::Reduce {
            axes: Some(axes), ..
        } if !axes.contains(&0) => step.args.iter().map(|&a| func.ty(a).shape.len()).max()?,
        _ => return None,
    };
    step.args
        .iter()
        .map(|&a| {
            let ty = func.ty(a);
            let rank = ty.shape.len();
            if let Some(&j) = run.member_of.get(&a) {
                return (rank == frame).then_some(Role::Inner(j));
            }
            if rank < frame || ty.shape.first() == Some(&Some(1)) {
                Some(Role::Whole)
            } else if rank == frame && ty.shape.first() == Some(&Some(rows)) {
                Some(Role::Rows)
            } else {
                None
            }
        })
        .collect()
}
