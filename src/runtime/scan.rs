//! How the VM runs a `scan` step: the sequences are cut into their steps once, then the
//! body's plan runs once per step with the carries and one slice of each sequence in the
//! body's parameter slots; what each step yields becomes the next carries and one entry of
//! each stacked output. Carries stay on the device from step to step; on a device with views
//! (the GPU) the slices are views of the sequences and the entries are stacked there, else
//! the slices go up and the entries come back through the device's host copies (none on the
//! host itself).

use super::device::Device;
use super::vm::{fetch, run_steps, take_yield, Env, VmState};
use crate::error::Error;
use crate::ir::infer::{infer_scan, scan_param_types};
use crate::ir::{infer, Func, Inst, Op, Region, TensorType, Value};
use crate::lower::{Branch, Step};
use crate::tensor::Tensor;
use std::collections::HashMap;

/// One step's slice of a sequence: a view on the device, or a host copy to upload.
enum Slice<D: Device> {
    Device(D::Array),
    Host(Tensor),
}

/// One step's slices, one per sequence.
type Steps<D> = Vec<Slice<D>>;

/// What a scan carries from iteration to iteration: the carries, their starting shapes, and
/// the entries of each stacked output so far.
struct Walk<D: Device> {
    carry: Vec<D::Array>,
    shapes: Vec<Vec<usize>>,
    stacked: Vec<Vec<D::Array>>,
    /// The stacked outputs being filled in place, entry by entry (empty where the device
    /// stacks `stacked` at the end instead).
    filled: Vec<D::Array>,
    /// Whether each yield is made by the body's steps (so it may move out), not a parameter
    /// or a value from outside (copied).
    made: Vec<bool>,
}

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
        let mut carry = Vec::with_capacity(n_c);
        for &c in init {
            carry.push(device.to_owned(env.view(device, func, c)?)?);
        }
        // A carry keeps the shape it starts with (as in JAX): its history stacks.
        let shapes: Vec<Vec<usize>> = carry
            .iter()
            .map(|c| device.shape(&device.view(c)).to_vec())
            .collect();
        let mut walk = Walk {
            carry,
            shapes,
            stacked: Vec::new(),
            filled: Vec::new(),
            made: (self.body.yields.iter())
                .map(|y| self.body.steps.iter().any(|s| s.results.contains(y)))
                .collect(),
        };
        let len = match device.in_place_steps() {
            true => self.run_on_views(device, func, inst, xs, env, state, &mut walk)?,
            false => {
                let (len, mut slices) = self.slices(device, func, xs, env)?;
                walk.stacked = self.stacks(len);
                for k in 0..len {
                    let t = self.at(k, len);
                    for (&p, s) in self.params[n_c..].iter().zip(slices[t].drain(..)) {
                        env.values[p.index()] = Some(match s {
                            Slice::Device(a) => a,
                            Slice::Host(t) => device.upload_owned(t)?,
                        });
                    }
                    self.iterate(device, func, inst, (k, len), env, state, &mut walk)?;
                }
                len
            }
        };
        let Walk {
            carry,
            stacked,
            filled,
            ..
        } = walk;
        for (&r, c) in inst.results.iter().zip(carry) {
            env.values[r.index()] = Some(c);
        }
        if !filled.is_empty() {
            for (&r, a) in inst.results[n_c..].iter().zip(filled) {
                env.values[r.index()] = Some(a);
            }
            return Ok(());
        }
        // With no steps, the stacked values' element shapes come from the body's types, made
        // concrete by the run-time shapes of what it reads.
        let empty_shapes = match len {
            0 => Some(self.empty_shapes(device, func, inst, env)?),
            _ => None,
        };
        for (j, mut parts) in stacked.into_iter().enumerate() {
            if self.reverse {
                parts.reverse();
            }
            let r = inst.results[n_c + j];
            let ty = func.ty(r);
            let elem: Vec<usize> = match (parts.first(), &empty_shapes) {
                (Some(p), _) => device.shape(&device.view(p)).to_vec(),
                (None, Some(shapes)) => shapes[j].clone(),
                (None, None) => unreachable!("no parts only without steps"),
            };
            let changes = |e: String| {
                Error::Shape(format!(
                    "scan: stacked output {j} changes shape between steps: {e}"
                ))
            };
            let on_device = match parts.is_empty() {
                true => None,
                false => device.stack(ty.dtype, &elem, &parts),
            };
            let stacked = match on_device {
                Some(Ok(a)) => a,
                Some(Err(e)) => return Err(changes(e.to_string())),
                None => {
                    let host = (parts.into_iter())
                        .map(|p| device.download_owned(p))
                        .collect::<Result<Vec<_>, _>>()?;
                    device.upload_owned(Tensor::stack(ty.dtype, &elem, &host).map_err(changes)?)?
                }
            };
            env.values[r.index()] = Some(stacked);
        }
        Ok(())
    }

    /// The step of iteration `k` of `len`: `k`, or counted from the end in reverse.
    fn at(&self, k: usize, len: usize) -> usize {
        if self.reverse {
            len - 1 - k
        } else {
            k
        }
    }

    /// One empty list per stacked output, for `len` entries.
    fn stacks<A>(&self, len: usize) -> Vec<Vec<A>> {
        let n_y = self.body.yields.len() - self.carries;
        (0..n_y).map(|_| Vec::with_capacity(len)).collect()
    }

    /// The scan's iterations on a device that views a step of a sequence where it is and
    /// writes one in place ([`Device::in_place_steps`], the host): the body reads each step's slices borrowed, as
    /// it reads the call's inputs, rather than as copies cut up front. The sequences the VM
    /// holds stay out of the values meanwhile (the body reads them, if at all, borrowed too)
    /// and go back after, also on an error. Returns the number of steps.
    #[allow(clippy::too_many_arguments)]
    fn run_on_views<D: Device>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        xs: &[Value],
        env: &mut Env<'_, '_, D>,
        state: &mut VmState<D>,
        walk: &mut Walk<D>,
    ) -> Result<usize, Error> {
        let (inputs, input_index) = env.params();
        // The sequences the VM holds, taken out (each once) so that views of them can live
        // beside the values; the rest are the call's inputs, viewed where they are.
        let mut held: Vec<(Value, D::Array)> = Vec::new();
        for &x in xs {
            if held.iter().any(|(h, _)| *h == x) {
                continue;
            }
            match env.values[x.index()].take() {
                Some(a) => held.push((x, a)),
                None if input_index[x.index()].is_some() => {}
                None => fetch(func, &env.values, x).map(|_| ())?,
            }
        }
        let ran = self.iterate_on_views(
            device,
            func,
            inst,
            xs,
            (inputs, input_index),
            &held,
            env,
            state,
            walk,
        );
        for (x, a) in held {
            env.values[x.index()] = Some(a);
        }
        ran
    }

    #[allow(clippy::too_many_arguments)]
    fn iterate_on_views<'i, D: Device + 'i>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        xs: &[Value],
        (inputs, input_index): (&'i [D::Ref<'_>], &[Option<usize>]),
        held: &'i [(Value, D::Array)],
        env: &mut Env<'_, '_, D>,
        state: &mut VmState<D>,
        walk: &mut Walk<D>,
    ) -> Result<usize, Error> {
        let n_c = self.carries;
        let whole: Vec<D::Ref<'i>> = xs
            .iter()
            .map(|&x| match held.iter().find(|(h, _)| *h == x) {
                Some((_, a)) => device.view(a),
                None => device.reborrow(&inputs[input_index[x.index()].expect("an input")]),
            })
            .collect();
        let mut len = None;
        for (i, (&x, w)) in xs.iter().zip(&whole).enumerate() {
            let n = device.shape(w).first().copied().unwrap_or(0);
            match len {
                None => len = Some(n),
                Some(m) if m != n => return Err(different_lengths(func, m, n, i, x)),
                Some(_) => {}
            }
        }
        let len = len.unwrap_or(0);
        walk.stacked = self.stacks(len);
        // The borrowed values of the body: the call's inputs, the held sequences, then one
        // slice of each sequence (its body parameter placed there).
        let mut index = input_index.to_vec();
        let base = inputs.len();
        for (k, (h, _)) in held.iter().enumerate() {
            index[h.index()] = Some(base + k);
        }
        for (k, &p) in self.params[n_c..].iter().enumerate() {
            index[p.index()] = Some(base + held.len() + k);
        }
        let mut borrowed: Vec<D::Ref<'_>> = inputs.iter().map(|r| device.reborrow(r)).collect();
        borrowed.extend(held.iter().map(|(_, a)| device.view(a)));
        let slices_at = borrowed.len();
        for k in 0..len {
            let t = self.at(k, len);
            borrowed.truncate(slices_at);
            for w in &whole {
                borrowed.push(device.slice_leading(w, t).ok_or_else(|| {
                    Error::Runtime("scan: the device has no view of a sequence's step".into())
                })?);
            }
            let mut body = Env::with_params(
                std::mem::take(&mut env.values),
                std::mem::take(&mut env.dests),
                &borrowed,
                &index,
            );
            let ran = self.iterate(device, func, inst, (k, len), &mut body, state, walk);
            env.values = body.values;
            env.dests = body.dests;
            ran?;
        }
        Ok(len)
    }

    /// Iteration `k` of `len`: the carries go into the body's parameters (its slices are
    /// there already), the body runs, and what it yields becomes the next carries and one
    /// entry of each stacked output.
    #[allow(clippy::too_many_arguments)]
    fn iterate<D: Device>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        (k, len): (usize, usize),
        env: &mut Env<'_, '_, D>,
        state: &mut VmState<D>,
        walk: &mut Walk<D>,
    ) -> Result<(), Error> {
        let n_c = self.carries;
        let t = self.at(k, len);
        for (&p, c) in self.params.iter().zip(walk.carry.drain(..)) {
            env.values[p.index()] = Some(c);
        }
        run_steps(device, func, &self.body.steps, false, env, state)?;
        if k == 0 && device.in_place_steps() {
            self.start_filling(device, func, inst, len, env, state, walk)?;
        }
        let mut outs = match walk.filled.is_empty() {
            true => self.take_yields(device, func, env, &walk.made)?,
            false => {
                self.fill(device, func, t, env, state, walk)?;
                self.take_yields(device, func, env, &walk.made[..n_c])?
            }
        };
        for &p in self.params {
            if let Some(a) = env.values[p.index()].take() {
                state.keep_buffer(device, a);
            }
        }
        for (j, y) in outs.drain(n_c..).enumerate() {
            if k == 0 {
                let entry = device.shape(&device.view(&y)).to_vec();
                let dtype = func.ty(inst.results[n_c + j]).dtype;
                super::memory::check_stacked(device, j, len, &entry, dtype)?;
            }
            walk.stacked[j].push(y);
        }
        for (i, (c, want)) in outs.iter().zip(&walk.shapes).enumerate() {
            let v = device.view(c);
            if device.shape(&v) != want.as_slice() {
                return Err(Error::Shape(format!(
                    "scan: step {t} yields carry {i} of shape {:?}, but it started as {want:?} (a carry keeps its shape from step to step)",
                    device.shape(&v)
                )));
            }
        }
        walk.carry = outs;
        Ok(())
    }

    /// After the first iteration, on a device that writes a leading index in place
    /// ([`Device::write_leading`]): one array of `len` entries per stacked output (a kept
    /// buffer where one fits), which each iteration's yields are then copied into. A yield
    /// that is also a carry moves on as the carry, with no copy of its own.
    #[allow(clippy::too_many_arguments)]
    fn start_filling<D: Device>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        len: usize,
        env: &Env<'_, '_, D>,
        state: &mut VmState<D>,
        walk: &mut Walk<D>,
    ) -> Result<(), Error> {
        let n_c = self.carries;
        for (j, &y) in self.body.yields[n_c..].iter().enumerate() {
            let entry = env.shape(device, func, y)?;
            let dtype = func.ty(inst.results[n_c + j]).dtype;
            super::memory::check_stacked(device, j, len, &entry, dtype)?;
            let mut shape = vec![len];
            shape.extend_from_slice(&entry);
            let buf = match state.take_buffer_shaped(dtype, &shape) {
                Some(b) => b,
                None => device.upload_owned(Tensor::zeros(dtype, &shape))?,
            };
            walk.filled.push(buf);
        }
        Ok(())
    }

    /// Copies this iteration's stacked yields into entry `t` of their outputs; a yield made
    /// in the body and not also a carry is done with, and its buffer kept for later steps.
    fn fill<D: Device>(
        &self,
        device: &D,
        func: &Func,
        t: usize,
        env: &mut Env<'_, '_, D>,
        state: &mut VmState<D>,
        walk: &mut Walk<D>,
    ) -> Result<(), Error> {
        let n_c = self.carries;
        let yields = &self.body.yields;
        for (j, &y) in yields[n_c..].iter().enumerate() {
            let written = device.write_leading(&mut walk.filled[j], t, &env.view(device, func, y)?);
            match written {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    return Err(Error::Shape(format!(
                        "scan: stacked output {j} changes shape between steps: step {t} is {e}"
                    )))
                }
                None => {
                    return Err(Error::Runtime(
                        "scan: the device cannot write a stacked output's step in place".into(),
                    ))
                }
            }
        }
        for (&y, &made) in yields[n_c..].iter().zip(&walk.made[n_c..]) {
            if made && !yields[..n_c].contains(&y) {
                if let Some(a) = env.values[y.index()].take() {
                    state.keep_buffer(device, a);
                }
            }
        }
        Ok(())
    }

    /// The element shapes of the stacked outputs of a scan of no steps: the body's yields
    /// typed by inference from the run-time shapes of the carries, the sequences' slices and
    /// the values the body reads from outside. An error where some dim stays unknown.
    fn empty_shapes<D: Device>(
        &self,
        device: &D,
        func: &Func,
        inst: &Step,
        env: &Env<'_, '_, D>,
    ) -> Result<Vec<Vec<usize>>, Error> {
        let n_c = self.carries;
        let outer = |v: Value| -> Option<TensorType> {
            let shape = env.shape(device, func, v).ok()?;
            Some(TensorType::fixed(func.ty(v).dtype, &shape))
        };
        let args: Vec<TensorType> = inst
            .args
            .iter()
            .map(|&a| outer(a))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Runtime("scan: an argument has no value".into()))?;
        let yields = (func.body.iter())
            .find_map(|i| find_scan(i, inst.results[0]))
            .and_then(|region| {
                let refs: Vec<&TensorType> = args.iter().collect();
                let params = scan_param_types(n_c, &refs).ok()?;
                yield_types(func, region, params, &mut HashMap::new(), &outer)
            });
        let stacked = yields.as_ref().map(|y| &y[n_c..]);
        (0..self.body.yields.len() - n_c)
            .map(|j| {
                let ty = stacked.and_then(|y| y.get(j)).unwrap_or(func.ty(self.body.yields[n_c + j]));
                ty.known_shape().ok_or_else(|| {
                    Error::Shape(format!(
                        "scan: with no steps, the shape of stacked output {j} ({ty} a step) is not known"
                    ))
                })
            })
            .collect()
    }

    /// The number of steps and, per step, one slice of each sequence: views where the device
    /// has them, else host slices (all cut up front: one copy of the sequences in all).
    fn slices<D: Device>(
        &self,
        device: &D,
        func: &Func,
        xs: &[Value],
        env: &mut Env<'_, '_, D>,
    ) -> Result<(usize, Vec<Steps<D>>), Error> {
        let mut len = None;
        let mut slices: Vec<Steps<D>> = Vec::new();
        for (i, &x) in xs.iter().enumerate() {
            env.own(device, x)?;
            let seq = fetch(func, &env.values, x)?;
            let v = device.view(seq);
            let n = device.shape(&v).first().copied().unwrap_or(0);
            let views: Option<Vec<D::Array>> =
                (0..n).map(|t| device.index_leading(&v, t)).collect();
            match len {
                None => {
                    len = Some(n);
                    slices = (0..n).map(|_| Vec::with_capacity(xs.len())).collect();
                }
                Some(m) if m != n => return Err(different_lengths(func, m, n, i, x)),
                Some(_) => {}
            }
            match views {
                Some(views) => {
                    for (s, view) in slices.iter_mut().zip(views) {
                        s.push(Slice::Device(view));
                    }
                }
                None => {
                    let host = device.download(seq)?;
                    for (t, s) in slices.iter_mut().enumerate() {
                        s.push(Slice::Host(host.index_leading(t)));
                    }
                }
            }
        }
        Ok((len.unwrap_or(0), slices))
    }

    /// The first `made.len()` of what one step of the body yields (`made`: whether each is
    /// made by the body), owned: a value made in the body moves out; anything
    /// else (a parameter, a value from outside) is copied.
    fn take_yields<D: Device>(
        &self,
        device: &D,
        func: &Func,
        env: &mut Env<'_, '_, D>,
        made: &[bool],
    ) -> Result<Vec<D::Array>, Error> {
        let yields = &self.body.yields[..made.len()];
        (0..made.len())
            .map(|i| take_yield(device, func, env, yields, i, made[i]))
            .collect()
    }
}

/// The error of a sequence `x`, the `i`th, of `n` steps where the first had `m`.
fn different_lengths(func: &Func, m: usize, n: usize, i: usize, x: Value) -> Error {
    Error::Shape(format!(
        "scan: the sequences have different lengths ({m} steps, and {n} for sequence {i}, {})",
        func.describe_at(x)
    ))
}

/// The region of the scan instruction (in `inst` or nested in its regions) whose first result
/// is `result`.
fn find_scan(inst: &Inst, result: Value) -> Option<&Region> {
    if matches!(inst.op, Op::Scan { .. }) && inst.results.first() == Some(&result) {
        return inst.regions.first();
    }
    (inst.regions.iter())
        .flat_map(|r| &r.body)
        .find_map(|i| find_scan(i, result))
}

/// The types `region` yields with its parameters typed `params` and the values it reads from
/// outside typed by `outer` (their run-time shapes): type inference over its instructions
/// (an `ifelse` by its first branch, a nested scan by its own region). `None` where an
/// instruction's types do not infer.
fn yield_types(
    func: &Func,
    region: &Region,
    params: Vec<TensorType>,
    known: &mut HashMap<Value, TensorType>,
    outer: &dyn Fn(Value) -> Option<TensorType>,
) -> Option<Vec<TensorType>> {
    for (&p, t) in region.params.iter().zip(params) {
        known.insert(p, t);
    }
    let ty = |v: Value, known: &HashMap<Value, TensorType>| {
        known
            .get(&v)
            .cloned()
            .or_else(|| outer(v))
            .unwrap_or_else(|| func.ty(v).clone())
    };
    for inst in &region.body {
        let args: Vec<TensorType> = inst.args.iter().map(|&a| ty(a, known)).collect();
        let refs: Vec<&TensorType> = args.iter().collect();
        let outs = match &inst.op {
            Op::IfElse => yield_types(func, inst.regions.first()?, vec![], known, outer)?,
            Op::Scan { carries, .. } => {
                let params = scan_param_types(*carries, &refs).ok()?;
                let y = yield_types(func, inst.regions.first()?, params, known, outer)?;
                infer_scan(*carries, &refs, &y).ok()?
            }
            op => infer(op, &refs).ok()?,
        };
        for (&r, t) in inst.results.iter().zip(outs) {
            known.insert(r, t);
        }
    }
    Some(region.yields.iter().map(|&y| ty(y, known)).collect())
}
