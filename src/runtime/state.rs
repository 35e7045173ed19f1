//! A compiled function's state: what it keeps between calls, read, reset, saved and loaded.
//!
//! Two kinds: the shared variables it reads and updates (their cells, which the user's graph
//! shares), and what its ops keep: each custom op's hidden outputs (`num_hidden_outputs`,
//! storage an op carries from call to call) and the call count (a custom op's random stream
//! is numbered by it). A VM keeps the second kind by step; [`collect`] and [`restore`] turn
//! it into [`OpState`] and back, checked against the plan, so every VM shares one reading of
//! it. Saved as `.npz` (numpy's `savez`): `shared/NAME`, `ops/STEP.OP/K` (output `K` of the
//! custom op `OP` at step `STEP`) and `calls`.

use crate::error::{Error, Result};
use crate::ir::{Func, Op};
use crate::lower::{Plan, Step, StepId};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// What a VM keeps per step between calls (a custom op's output storage, hidden outputs
/// included).
pub type Storage = HashMap<StepId, Vec<Option<Tensor>>>;

/// What a function's ops keep between calls.
#[derive(Clone, Debug, Default)]
pub struct OpState {
    /// Calls so far (the next call is `calls + 1`).
    pub calls: u64,
    /// The custom ops' hidden outputs, each with the step that keeps it.
    pub hidden: Vec<HiddenOutput>,
}

/// The value a custom op keeps in one of its hidden outputs.
#[derive(Clone, Debug)]
pub struct HiddenOutput {
    /// The step of the custom op in the function's plan.
    pub step: StepId,
    /// The op's name (checked on restore: a state belongs to one function).
    pub op: String,
    /// The output's index among all of the op's outputs.
    pub output: usize,
    /// The value the output holds.
    pub value: Tensor,
}

impl HiddenOutput {
    /// Its name in a saved state: `ops/STEP.OP/K`.
    pub fn key(&self) -> String {
        format!("ops/{}.{}/{}", self.step.0, self.op, self.output)
    }
}

/// The step `id` of `plan`, if it is a custom op, with the range of its hidden outputs.
fn custom_step(plan: &Plan, id: StepId) -> Option<(&Step, &str, std::ops::Range<usize>)> {
    plan.all_steps()
        .into_iter()
        .find(|s| s.id == id)
        .and_then(|s| match &s.op {
            Op::Custom(c) => {
                let n = s.results.len();
                Some((s, c.name(), n - c.num_hidden_outputs().min(n)..n))
            }
            _ => None,
        })
}

/// The hidden outputs in `storage`, by step and output.
pub fn collect(plan: &Plan, calls: u64, storage: &Storage) -> OpState {
    let mut hidden = Vec::new();
    for (&step, slot) in storage {
        let Some((_, op, range)) = custom_step(plan, step) else {
            continue;
        };
        for k in range {
            if let Some(Some(value)) = slot.get(k) {
                hidden.push(HiddenOutput {
                    step,
                    op: op.to_string(),
                    output: k,
                    value: value.clone(),
                });
            }
        }
    }
    hidden.sort_by_key(|h| (h.step, h.output));
    OpState { calls, hidden }
}

/// The storage that `state` describes for `plan` (lowered from `func`), each hidden output
/// checked against its step (a custom op of that name) and its type; the other outputs'
/// storage starts empty, as in a fresh function.
pub fn restore(func: &Func, plan: &Plan, state: &OpState) -> Result<Storage> {
    let mut storage = Storage::new();
    for h in &state.hidden {
        let bad = |why: String| Error::Input(format!("state entry `{}`: {why}", h.key()));
        let (step, op, range) = custom_step(plan, h.step).ok_or_else(|| {
            bad(format!(
                "{} has no custom op at step {}",
                func.name, h.step.0
            ))
        })?;
        if op != h.op {
            return Err(bad(format!("step {} of {} is `{op}`", h.step.0, func.name)));
        }
        if !range.contains(&h.output) {
            return Err(bad(format!(
                "`{op}` keeps outputs {range:?} between calls, not {}",
                h.output
            )));
        }
        let ty = func.ty(step.results[h.output]);
        if h.value.dtype() != ty.dtype || !ty.accepts_shape(h.value.shape()) {
            return Err(bad(format!(
                "expected {ty}, got an array of {} {:?}",
                h.value.dtype(),
                h.value.shape()
            )));
        }
        let slot = storage
            .entry(h.step)
            .or_insert_with(|| vec![None; step.results.len()]);
        slot[h.output] = Some(h.value.clone());
    }
    Ok(storage)
}

/// A function's whole state: its shared variables' values, by name, and its ops' state.
#[derive(Clone, Debug, Default)]
pub struct FunctionState {
    /// Each shared variable's name in the state (its own, or `#i`) and value, in the
    /// function's order.
    pub shared: Vec<(String, Tensor)>,
    /// What the function's ops keep: the call count and hidden outputs.
    pub ops: OpState,
}

impl FunctionState {
    /// The `.npz` entries of this state.
    pub fn entries(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = self
            .shared
            .iter()
            .map(|(n, t)| (format!("shared/{n}"), t.clone()))
            .collect();
        out.extend(self.ops.hidden.iter().map(|h| (h.key(), h.value.clone())));
        out.push((
            "calls".into(),
            Tensor::I64(ndarray::arr0(self.ops.calls as i64).into_dyn()),
        ));
        out
    }

    /// The state the `.npz` entries describe (as [`FunctionState::entries`] names them).
    pub fn from_entries(entries: Vec<(String, Tensor)>) -> Result<FunctionState> {
        let mut state = FunctionState::default();
        for (key, value) in entries {
            let bad = |why: &str| Error::Input(format!("state entry `{key}`: {why}"));
            if key == "calls" {
                state.ops.calls = match &value {
                    Tensor::I64(a) if a.len() == 1 => u64::try_from(a.iter().copied().sum::<i64>())
                        .map_err(|_| bad("the call count is negative"))?,
                    _ => return Err(bad("expected one i64, the call count")),
                };
            } else if let Some(name) = key.strip_prefix("shared/") {
                state.shared.push((name.to_string(), value));
            } else if let Some(rest) = key.strip_prefix("ops/") {
                // STEP.OP/K; an op's name may hold dots and slashes, the numbers do not.
                let parsed = rest.split_once('.').and_then(|(step, rest)| {
                    let (op, k) = rest.rsplit_once('/')?;
                    Some((step.parse().ok()?, op, k.parse().ok()?))
                });
                let (step, op, output) =
                    parsed.ok_or_else(|| bad("expected ops/STEP.OP/OUTPUT"))?;
                state.ops.hidden.push(HiddenOutput {
                    step: StepId(step),
                    op: op.to_string(),
                    output,
                    value,
                });
            } else {
                return Err(bad(
                    "not part of a function's state (shared/..., ops/..., calls)",
                ));
            }
        }
        Ok(state)
    }
}
