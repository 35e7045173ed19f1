//! How the VM runs a `scan` step: the sequences are cut into their steps on the host once,
//! then the body's plan runs once per step with the carries and one slice of each sequence
//! in the body's parameter slots; what each step yields becomes the next carries and one
//! entry of each stacked output. Carries stay on the device from step to step; slices go up
//! and stacked entries come back through the device's host copies (none on the host itself).

use super::device::Device;
use super::vm::{fetch, run_steps, Env, VmState};
use crate::error::Error;
use crate::ir::{Func, Value};
use crate::lower::{Branch, Step};
use crate::tensor::Tensor;

/// A scan step's kernel, borrowed from the plan.
pub(super) struct ScanWalk<'p> {
    pub body: &'p Branch,
    pub params: &'p [Value],
    pub carries: usize,
    pub reverse: bool,
}

impl ScanWalk<'_> {
    pub fn run<D: Device>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        env: &mut Env<'_, '_, D>,
        state: &mut VmState<D>,
    ) -> Result<(), Error> {
        let n_c = self.carries;
        let (init, xs) = inst.args.split_at(n_c);
        let (len, mut slices) = self.slices(device, func, xs, env)?;
        let mut carry = Vec::with_capacity(n_c);
        for &c in init {
            env.own(device, c)?;
            carry.push(device.to_owned(device.view(fetch(func, &env.values, c)?))?);
        }
        // A carry keeps the shape it starts with (as in JAX): its history stacks.
        let shapes: Vec<Vec<usize>> = carry
            .iter()
            .map(|c| device.shape(&device.view(c)).to_vec())
            .collect();
        let n_y = self.body.yields.len() - n_c;
        let mut stacked: Vec<Vec<Tensor>> = (0..n_y).map(|_| Vec::with_capacity(len)).collect();
        for k in 0..len {
            let t = if self.reverse { len - 1 - k } else { k };
            for (&p, c) in self.params.iter().zip(carry.drain(..)) {
                env.values[p.index()] = Some(c);
            }
            for (&p, s) in self.params[n_c..].iter().zip(slices[t].drain(..)) {
                env.values[p.index()] = Some(device.upload_owned(s)?);
            }
            run_steps(device, func, &self.body.steps, false, env, state)?;
            let mut outs = self.take_yields(device, func, env)?;
            for &p in self.params {
                if let Some(a) = env.values[p.index()].take() {
                    state.keep_buffer(device, a);
                }
            }
            for (j, y) in outs.drain(n_c..).enumerate() {
                stacked[j].push(device.download_owned(y)?);
            }
            for (i, (c, want)) in outs.iter().zip(&shapes).enumerate() {
                let v = device.view(c);
                if device.shape(&v) != want.as_slice() {
                    return Err(Error::Shape(format!(
                        "scan: step {t} yields carry {i} of shape {:?}, but it started as {want:?} (a carry keeps its shape from step to step)",
                        device.shape(&v)
                    )));
                }
            }
            carry = outs;
        }
        for (&r, c) in inst.results.iter().zip(carry) {
            env.values[r.index()] = Some(c);
        }
        for (j, mut parts) in stacked.into_iter().enumerate() {
            if self.reverse {
                parts.reverse();
            }
            let r = inst.results[n_c + j];
            let ty = func.ty(r);
            // Each part has the shape of the first (or, with no steps, the type's, `?` as 0).
            let elem: Vec<usize> = match parts.first() {
                Some(p) => p.shape().to_vec(),
                None => ty.shape[1..].iter().map(|d| d.unwrap_or(0)).collect(),
            };
            let t = Tensor::stack(ty.dtype, &elem, &parts).map_err(|e| {
                Error::Shape(format!(
                    "scan: stacked output {j} changes shape between steps: {e}"
                ))
            })?;
            env.values[r.index()] = Some(device.upload_owned(t)?);
        }
        Ok(())
    }

    /// The number of steps and, per step, one host slice of each sequence (all cut up front:
    /// one copy of the sequences in all).
    fn slices<D: Device>(
        &self,
        device: &D,
        func: &Func,
        xs: &[Value],
        env: &mut Env<'_, '_, D>,
    ) -> Result<(usize, Vec<Vec<Tensor>>), Error> {
        let mut len = None;
        let mut slices: Vec<Vec<Tensor>> = Vec::new();
        for (i, &x) in xs.iter().enumerate() {
            env.own(device, x)?;
            let host = device.download(fetch(func, &env.values, x)?)?;
            let n = host.shape().first().copied().unwrap_or(0);
            match len {
                None => {
                    len = Some(n);
                    slices = (0..n).map(|_| Vec::with_capacity(xs.len())).collect();
                }
                Some(m) if m != n => {
                    return Err(Error::Shape(format!(
                        "scan: the sequences have different lengths ({m} steps, and {n} for sequence {i}, {})",
                        func.describe_at(x)
                    )))
                }
                Some(_) => {}
            }
            for (t, s) in slices.iter_mut().enumerate() {
                s.push(host.index_leading(t));
            }
        }
        Ok((len.unwrap_or(0), slices))
    }

    /// What one step of the body yields, owned: a value made in the body (and yielded once)
    /// moves out; anything else (a parameter, a value from outside) is copied.
    fn take_yields<D: Device>(
        &self,
        device: &D,
        func: &Func,
        env: &mut Env<'_, '_, D>,
    ) -> Result<Vec<D::Array>, Error> {
        let yields = &self.body.yields;
        let mut outs = Vec::with_capacity(yields.len());
        for (i, &y) in yields.iter().enumerate() {
            env.own(device, y)?;
            let made = self.body.steps.iter().any(|s| s.results.contains(&y));
            let v = if made && !yields[i + 1..].contains(&y) {
                env.values[y.index()].take()
            } else {
                None
            };
            outs.push(match v {
                Some(v) => v,
                None => device.to_owned(device.view(fetch(func, &env.values, y)?))?,
            });
        }
        Ok(outs)
    }
}
