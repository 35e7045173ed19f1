//! `scan` ahead of time: a loop step whose body is the scan body's plan, planned once. The
//! carries live in buffers of their own (copied in from the initial values first); each
//! sequence's parameter is a slice root (`Loc::Slice`) that the loop moves to step `t`; what
//! the body yields goes to the next carries (then copied over the carries, so a body that
//! swaps two carries reads the old ones) and to step `t` of each stacked output, as the VM's
//! `runtime::scan` does, reversed steps included.

use super::{copy_program, known, Builder, Loc, Root, Step, View};
use crate::error::{Error, Result};
use crate::ir::Value;
use crate::lower::{self, Branch};

impl Builder<'_> {
    /// A root that is step `t` of `of`'s leading axis inside loop `looped`, and the view of
    /// that step laid out as `v` (the whole, `[T, ..]`) without its leading dim.
    fn step_of(&mut self, v: &View, looped: usize) -> View {
        let bytes = v.shape[1..].iter().product::<usize>() * v.dtype.size();
        self.roots.push(Root {
            bytes,
            loc: Some(Loc::Slice {
                of: v.root,
                stride: v.strides[0],
                looped,
            }),
            first: 0,
            last: 0,
            buffer: false,
        });
        View {
            root: self.roots.len() - 1,
            dtype: v.dtype,
            offset: v.offset,
            shape: v.shape[1..].to_vec(),
            strides: v.strides[1..].to_vec(),
        }
    }

    /// A map step copying `from` into `to`.
    fn copy(&mut self, what: &str, from: View, to: View) {
        self.steps.push(Step::Map {
            what: what.to_string(),
            program: copy_program(from.dtype, to.dtype),
            shape: to.shape.clone(),
            inputs: vec![from],
            outputs: vec![to],
        });
    }

    /// Plans `scan`: `args` are the initial carries, then the sequences.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan(
        &mut self,
        what: &str,
        inst: &lower::Step,
        args: &[View],
        body: &Branch,
        params: &[Value],
        carries: usize,
        reverse: bool,
    ) -> Result<()> {
        let func = self.func;
        let (init, xs) = args.split_at(carries);
        let count = xs.first().map_or(0, |x| x.shape[0]);
        if let Some(x) = xs.iter().find(|x| x.shape.first() != Some(&count)) {
            return Err(Error::Shape(format!(
                "{what}: sequences of {count} and {:?} steps",
                x.shape.first()
            )));
        }
        let id = self.loops;
        self.loops += 1;
        let mut state = Vec::new();
        for (c, from) in init.iter().enumerate() {
            let buf = self.buffer(from.dtype, &from.shape);
            self.copy(&format!("{what}: carry {c}"), from.clone(), buf.clone());
            state.push(buf);
        }
        let stacked: Vec<View> = inst.results[carries..]
            .iter()
            .map(|&r| {
                let shape = known(func, r, "a stacked output")?;
                Ok(self.buffer(func.ty(r).dtype, &shape))
            })
            .collect::<Result<_>>()?;
        for (p, c) in params.iter().zip(&state) {
            self.views.insert(*p, c.clone());
        }
        for (p, x) in params[carries..].iter().zip(xs) {
            let slice = self.step_of(x, id);
            self.views.insert(*p, slice);
        }
        let outer = std::mem::take(&mut self.steps);
        let planned = self.scan_body(what, body, carries, &state, &stacked, id);
        let inner = std::mem::replace(&mut self.steps, outer);
        planned?;
        self.steps.push(Step::Loop {
            what: what.to_string(),
            id,
            count,
            reverse,
            body: inner,
        });
        for (r, v) in inst.results.iter().zip(state.into_iter().chain(stacked)) {
            self.views.insert(*r, v);
        }
        Ok(())
    }

    /// The body's steps, then its yields: the carries (through buffers of the next ones) and
    /// step `t` of each stacked output.
    fn scan_body(
        &mut self,
        what: &str,
        body: &Branch,
        carries: usize,
        state: &[View],
        stacked: &[View],
        id: usize,
    ) -> Result<()> {
        self.steps(&body.steps)?;
        let yields: Vec<View> = body
            .yields
            .iter()
            .map(|&y| self.view(y))
            .collect::<Result<_>>()?;
        let mut next = Vec::new();
        for (c, (y, carry)) in yields.iter().zip(state).enumerate() {
            if y.shape != carry.shape {
                return Err(Error::Shape(format!(
                    "{what}: a step yields carry {c} of shape {:?}, but it started as {:?} (a \
                     carry keeps its shape from step to step)",
                    y.shape, carry.shape
                )));
            }
            let n = self.buffer(carry.dtype, &carry.shape);
            self.copy(&format!("{what}: next carry {c}"), y.clone(), n.clone());
            next.push(n);
        }
        for (j, (y, out)) in yields[carries..].iter().zip(stacked).enumerate() {
            let at = self.step_of(out, id);
            if y.shape != at.shape {
                return Err(Error::Shape(format!(
                    "{what}: stacked output {j} of {:?} a step, but {:?} yielded",
                    at.shape, y.shape
                )));
            }
            self.copy(&format!("{what}: stacked output {j}"), y.clone(), at);
        }
        for (c, (n, carry)) in next.into_iter().zip(state).enumerate() {
            self.copy(&format!("{what}: carry {c}"), n, carry.clone());
        }
        Ok(())
    }
}
