//! The host as a device of the VM: values are host arrays (`Tensor`s, a call's inputs read
//! where the caller has them), the steps a backend compiled run as its thunks (the CPU
//! backend's kernels, the GPU backend's host-compiled kernels), matrix products through the
//! GEMM library (folded transposes read through strides, a fused update written over its
//! matrix), row groups by blocks (`rows`), the ops whose reference reads views (indexing,
//! sorting, windowed ops: `perform::perform_view`) on the arrays where they are, and every
//! other step as the op's `perform` on the arrays themselves (a call's inputs copied first).
//! Elementwise kernels read each element before writing it, and a scatter checks its indices
//! before it writes, so those steps run in place where the plan marks them. With no thunks
//! this is the reference interpreter.

use super::device::Device;
use super::vm::{Env, VmState};
use super::Thunk;
use crate::error::{Error, Result};
use crate::ir::{DType, Func};
use crate::lower::rows::Role;
use crate::lower::{Kernel, Plan, Step, StepId};
use crate::tensor::{Tensor, TensorRef};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Compiled thunks by the step they run.
pub type Thunks = HashMap<StepId, Arc<dyn Thunk>>;

/// The host device: its thunks indexed by step id (a lookup per step and call, so no
/// hashing).
#[derive(Clone, Default)]
pub struct Host {
    pub(super) thunks: Arc<Vec<Option<Arc<dyn Thunk>>>>,
}

impl Host {
    /// The host with `thunks` for the steps of `plan` they were compiled for.
    pub fn with_thunks(plan: &Plan, thunks: Thunks) -> Host {
        let mut table = vec![None; plan.n_steps];
        for (id, t) in thunks {
            if let Some(slot) = table.get_mut(id.index()) {
                *slot = Some(t);
            }
        }
        Host {
            thunks: Arc::new(table),
        }
    }

    pub(super) fn thunk(&self, step: &Step) -> Option<&Arc<dyn Thunk>> {
        self.thunks.get(step.id.index())?.as_ref()
    }
}

/// Whether `step` is an op whose reference implementation reads views (`perform_view`), so
/// it runs on a call's inputs where they are instead of on owned copies.
fn reads_views(step: &Step) -> bool {
    matches!(step.kernel, Kernel::Perform) && crate::perform::has_view_form(&step.op)
}

impl Device for Host {
    type Array = Tensor;
    type Ref<'a> = TensorRef<'a>;

    fn view<'a>(&self, a: &'a Tensor) -> TensorRef<'a> {
        a.view()
    }
    fn reborrow<'a>(&self, r: &'a TensorRef<'_>) -> TensorRef<'a> {
        r.reborrow()
    }
    fn shape<'r>(&self, r: &'r TensorRef<'_>) -> &'r [usize] {
        r.shape()
    }
    fn dtype(&self, r: &TensorRef<'_>) -> DType {
        r.dtype()
    }
    fn is_dense(&self, r: &TensorRef<'_>) -> bool {
        r.is_standard_layout()
    }
    fn to_owned(&self, r: TensorRef<'_>) -> Result<Tensor> {
        Ok(r.to_owned())
    }
    fn upload(&self, t: TensorRef<'_>) -> Result<Tensor> {
        Ok(t.to_owned())
    }
    fn download<'a>(&self, a: &'a Tensor) -> Result<Cow<'a, Tensor>> {
        Ok(Cow::Borrowed(a))
    }
    fn download_owned(&self, a: Tensor) -> Result<Tensor> {
        Ok(a)
    }
    fn upload_owned(&self, t: Tensor) -> Result<Tensor> {
        Ok(t)
    }

    fn runs(&self, step: &Step) -> bool {
        matches!(step.kernel, Kernel::Gemm { .. })
            || self.thunk(step).is_some()
            || reads_views(step)
    }

    fn run(
        &self,
        step: &Step,
        args: &[TensorRef<'_>],
        dest: Option<Tensor>,
    ) -> Result<Vec<Tensor>> {
        if reads_views(step) {
            // A scatter writes into a dead buffer of the result's type where the VM has one,
            // the array copied in first (in place, `update_in_place` runs instead).
            if let Some(mut out) = dest {
                if let Some(done) = crate::perform::scatter_into(&step.op, args, &mut out, false) {
                    return done.map(|()| vec![out]);
                }
            }
            return crate::perform::perform_view(&step.op, args).unwrap_or_else(|| {
                Err(Error::Runtime(format!(
                    "{}: no implementation on views",
                    step.op.name()
                )))
            });
        }
        if let Kernel::Gemm { .. } = step.kernel {
            // `dest` is the fused update's matrix itself where the VM could hand it over.
            return super::device::host_gemm(step, args, dest).map(|t| vec![t]);
        }
        let t = self.thunk(step).ok_or_else(|| {
            Error::Runtime(format!("{}: no compiled kernel", step.op.display_name()))
        })?;
        t.run_into(args, dest)
    }

    fn update_in_place(
        &self,
        step: &Step,
        args: &[TensorRef<'_>],
        buf: &mut Tensor,
    ) -> Option<Result<()>> {
        // A scatter marked in place writes only its named positions, after checking them all.
        if !reads_views(step) {
            return None;
        }
        crate::perform::scatter_into(&step.op, args, buf, true)
    }

    fn in_place(&self) -> bool {
        true
    }
    fn slice_leading<'a>(&self, r: &TensorRef<'a>, i: usize) -> Option<TensorRef<'a>>
    where
        Self: 'a,
    {
        Some(r.clone().index_leading(i))
    }
    fn in_place_steps(&self) -> bool {
        true
    }
    fn write_leading(&self, dst: &mut Tensor, i: usize, src: &TensorRef<'_>) -> Option<Result<()>> {
        Some(dst.write_leading(i, src.clone()).map_err(Error::Shape))
    }
    fn view_moving(&self, step: &Step, a: Tensor) -> std::result::Result<Tensor, Tensor> {
        crate::perform::view_moving(&step.op, a)
    }
    fn row_major(&self, a: Tensor) -> Tensor {
        match a.view().is_standard_layout() {
            true => a,
            false => a.view().to_standard_owned(),
        }
    }

    unsafe fn alias<'a>(&self, a: &Tensor) -> Self::Ref<'a> {
        // SAFETY: passed on from the caller (`Device::alias`).
        unsafe { a.alias_view() }
    }
    fn assign(&self, dst: &mut Tensor, src: Tensor) -> Option<Tensor> {
        super::function::assign_or_replace(dst, src)
    }
    fn pooled_bytes(&self, a: &Tensor) -> Option<usize> {
        Some(a.len() * a.dtype().size())
    }
    fn address(&self, a: &Tensor) -> Option<usize> {
        (!a.is_empty()).then(|| a.view().as_ptr() as usize)
    }
    fn host_memory(&self) -> bool {
        true
    }

    fn run_rows(
        &self,
        func: &Func,
        group: &Step,
        rows: usize,
        members: &[Step],
        roles: &[Vec<Role>],
        env: &mut Env<'_, '_, Self>,
        state: &mut VmState<Self>,
    ) -> Result<bool> {
        super::rows::run_rows(self, func, group, rows, members, roles, env, state)
    }
}
