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
        let mut stacked: Vec<Vec<D::Array>> = (0..n_y).map(|_| Vec::with_capacity(len)).collect();
        for k in 0..len {
            let t = if self.reverse { len - 1 - k } else { k };
            for (&p, c) in self.params.iter().zip(carry.drain(..)) {
                env.values[p.index()] = Some(c);
            }
            for (&p, s) in self.params[n_c..].iter().zip(slices[t].drain(..)) {
                env.values[p.index()] = Some(match s {
                    Slice::Device(a) => a,
                    Slice::Host(t) => device.upload_owned(t)?,
                });
            }
            run_steps(device, func, &self.body.steps, false, env, state)?;
            let mut outs = self.take_yields(device, func, env)?;
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
                stacked[j].push(y);
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
                Some(m) if m != n => {
                    return Err(Error::Shape(format!(
                        "scan: the sequences have different lengths ({m} steps, and {n} for sequence {i}, {})",
                        func.describe_at(x)
                    )))
                }
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

    /// What one step of the body yields, owned: a value made in the body moves out; anything
    /// else (a parameter, a value from outside) is copied.
    fn take_yields<D: Device>(
        &self,
        device: &D,
        func: &Func,
        env: &mut Env<'_, '_, D>,
    ) -> Result<Vec<D::Array>, Error> {
        let yields = &self.body.yields;
        (0..yields.len())
            .map(|i| {
                let made = self
                    .body
                    .steps
                    .iter()
                    .any(|s| s.results.contains(&yields[i]));
                take_yield(device, func, env, yields, i, made)
            })
            .collect()
    }
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
