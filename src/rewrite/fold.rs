//! Constant folding: an instruction whose arguments are all constants is computed at compile
//! time with the op's own `perform` and becomes a constant. Results above [`MAX_FOLDED`]
//! elements are left to run time (folding them would only grow the function), and so are ops
//! that are not pure functions of their arguments (random ops are, but their results can be
//! large; custom ops may keep state).

use crate::ir::{Func, Inst, Op, Value};
use crate::perform::perform;
use crate::tensor::Tensor;
use std::collections::HashMap;

/// The largest result, in elements, that is folded into a constant.
pub const MAX_FOLDED: usize = 4096;

fn foldable(op: &Op) -> bool {
    !matches!(
        op,
        Op::Const(_) | Op::Custom(_) | Op::IfElse | Op::Random { .. }
    )
}

/// Folds the top-level body (regions stay as they are: only one of them runs).
pub fn fold(func: &Func) -> Func {
    let mut f = func.clone();
    let mut consts: HashMap<Value, Tensor> = HashMap::new();
    let mut body = Vec::with_capacity(f.body.len());
    for inst in std::mem::take(&mut f.body) {
        if let Op::Const(t) = &inst.op {
            consts.insert(inst.results[0], t.clone());
            body.push(inst);
            continue;
        }
        let args: Option<Vec<&Tensor>> = inst.args.iter().map(|a| consts.get(a)).collect();
        let folded = match args {
            Some(args) if foldable(&inst.op) && inst.results.len() == 1 => {
                // A failure (a shape error, say) is left for run time to report. A result more
                // precisely typed than the instruction (known dims where it says `?`) is not
                // folded: its readers' types were inferred from the instruction's.
                perform(&inst.op, &args)
                    .ok()
                    .and_then(|mut v| v.pop())
                    .filter(|t| t.len() <= MAX_FOLDED && t.ty() == *f.ty(inst.results[0]))
            }
            _ => None,
        };
        match folded {
            Some(t) => {
                consts.insert(inst.results[0], t.clone());
                body.push(Inst {
                    op: Op::Const(t),
                    args: vec![],
                    results: inst.results,
                    regions: vec![],
                });
            }
            None => body.push(inst),
        }
    }
    f.body = body;
    f
}
