//! Broadcasting is decided by types (docs/reference/semantics.md): a dim broadcasts only where its type
//! says 1, and a `?` dim never does. A `?` dim of extent 1 that meets a larger extent at run
//! time is therefore an error, not a stretch, so that what a gradient sums over (the dims typed
//! 1) is what the forward pass broadcast.
//!
//! Lowering records, for each step that broadcasts its arguments, the argument axes typed `?`
//! (a [`StretchCheck`]); the runtime checks them against the run-time shapes before the step
//! runs, whatever computes it (`perform`, a compiled kernel, a row group's member). Shapes known
//! in the types need no check: type inference has already matched them.

use crate::ir::{Func, Op, Value};

/// How a step's arguments are aligned when they broadcast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Every argument against the others, aligned on the right (elementwise ops, fused
    /// reductions' prologues, `select`).
    Elementwise,
    /// The batch dims of a matrix product (all but the last two of each operand).
    MatmulBatch,
    /// The one argument against a target shape (`broadcast_to`).
    To(Vec<usize>),
}

/// The `?`-typed axes of a step's arguments that must not stretch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StretchCheck {
    /// How the arguments' axes line up against each other.
    pub frame: Frame,
    /// `(argument, axis of that argument)`, each typed `?`.
    pub unknown: Vec<(usize, usize)>,
}

/// A `?`-typed axis found stretched at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stretched {
    /// The argument whose axis it is.
    pub arg: usize,
    /// The axis, of that argument.
    pub axis: usize,
    /// The axis's extent at run time.
    pub extent: usize,
    /// The extent the other arguments (or the target shape) give that axis.
    pub target: usize,
}

/// The check for a step computing `op` of `args`, or `None` when nothing can stretch a `?`
/// dim there.
pub fn check_of(func: &Func, op: &Op, args: &[Value]) -> Option<StretchCheck> {
    let frame = match op {
        Op::MatMul => Frame::MatmulBatch,
        Op::BroadcastTo { shape } => Frame::To(shape.clone()),
        Op::FusedReduce { .. } => Frame::Elementwise,
        op if op.is_elementwise() => Frame::Elementwise,
        _ => return None,
    };
    // With one argument, only an explicit target can stretch it.
    if args.len() < 2 && !matches!(frame, Frame::To(_)) {
        return None;
    }
    let mut unknown = Vec::new();
    for (k, &a) in args.iter().enumerate() {
        let ty = func.ty(a);
        let axes = match frame {
            Frame::MatmulBatch => ty.rank().saturating_sub(2),
            _ => ty.rank(),
        };
        if matches!(frame, Frame::MatmulBatch) && ty.rank() < 2 {
            continue;
        }
        for axis in 0..axes {
            if ty.shape[axis].is_none() {
                unknown.push((k, axis));
            }
        }
    }
    (!unknown.is_empty()).then_some(StretchCheck { frame, unknown })
}

impl StretchCheck {
    /// Checks the arguments' run-time shapes (one per argument).
    pub fn check(&self, shapes: &[&[usize]]) -> Result<(), Stretched> {
        let frames: Vec<&[usize]> = match &self.frame {
            Frame::MatmulBatch => shapes
                .iter()
                .map(|s| {
                    if s.len() >= 2 {
                        &s[..s.len() - 2]
                    } else {
                        &s[..0]
                    }
                })
                .collect(),
            _ => shapes.to_vec(),
        };
        // The extent each aligned axis broadcasts to: the one that is not 1, if any.
        let rank = match &self.frame {
            Frame::To(t) => t.len(),
            _ => frames.iter().map(|s| s.len()).max().unwrap_or(0),
        };
        let target = |out: usize| -> usize {
            if let Frame::To(t) = &self.frame {
                return t[out];
            }
            frames
                .iter()
                .filter_map(|s| {
                    let lead = rank - s.len();
                    (out >= lead).then(|| s[out - lead])
                })
                .find(|&d| d != 1)
                .unwrap_or(1)
        };
        for &(arg, axis) in &self.unknown {
            let Some(s) = frames.get(arg) else { continue };
            let Some(&extent) = s.get(axis) else { continue };
            if s.len() > rank {
                continue;
            }
            let t = target(axis + rank - s.len());
            if extent != t {
                return Err(Stretched {
                    arg,
                    axis,
                    extent,
                    target: t,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn func(src: &str) -> Func {
        crate::ir::text::parse("t.kir", src).unwrap().remove(0)
    }

    #[test]
    fn unknown_dims_of_broadcasting_steps_are_checked() {
        let f = func(
            "func @f(%b: f64[?], %x: f64[?, 3], %m: f32[?, 2, 2], %w: f32[2, 2]) -> (f64[?, 3], f32[?, 2, 2]) {
               %y = mul %x, %b
               %p = matmul %m, %w
               return %y, %p
             }",
        );
        let [y, p] = [&f.body[0], &f.body[1]];
        let c = check_of(&f, &y.op, &y.args).unwrap();
        assert_eq!(c.unknown, vec![(0, 0), (1, 0)]);
        // `b` given [1] meets 3 columns: an error on its axis 0.
        let e = c.check(&[&[4, 3], &[1]]).unwrap_err();
        assert_eq!((e.arg, e.axis, e.extent, e.target), (1, 0, 1, 3));
        assert!(c.check(&[&[4, 3], &[3]]).is_ok());
        // Both `?` of extent 1: nothing stretches.
        assert!(c.check(&[&[1, 3], &[3]]).is_ok());
        // A matmul's batch dim against a 2-D operand: nothing to stretch it to.
        let c = check_of(&f, &p.op, &p.args).unwrap();
        assert!(c.check(&[&[1, 2, 2], &[2, 2]]).is_ok());
    }

    #[test]
    fn broadcast_to_checks_its_target() {
        let f = func(
            "func @f(%b: f64[?]) -> (f64[2, 3]) {
               %y = broadcast_to %b {shape = [2, 3]}
               return %y
             }",
        );
        let c = check_of(&f, &f.body[0].op, &f.body[0].args).unwrap();
        assert!(c.check(&[&[3]]).is_ok());
        assert_eq!(c.check(&[&[1]]).unwrap_err().target, 3);
    }
}
