//! A shared variable's storage: its value in host memory and, where a device backend left it
//! there, a copy on the device (`Backend::Gpu` keeps the variables it reads and updates on the
//! GPU between calls, so a training loop's weights do not cross to the host at every step).
//!
//! The host value is the variable's value unless the device copy is *newer* (a device
//! function's update left there and not copied back yet). Whoever reads the host value through
//! [`SharedValue::read`] (a host backend's call, `Var::value`, a function's state) first copies
//! a newer device value back; whoever replaces the host value ([`SharedValue::write`],
//! [`SharedValue::set`]) drops the device copy, which is then stale. A device backend's call
//! takes the variable with [`SharedValue::lock_device`] and sees both.
//!
//! One lock (the host value's `RwLock`) orders everything: the device slot is read or changed
//! only by a thread that holds it, exclusively to change what the value is, shared to fill an
//! empty slot with a copy of the host value (any two such copies are equal).

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Storage of a shared variable: state kept inside compiled functions and updated by them.
pub type SharedCell = Arc<SharedValue>;

/// An array on a device that can stand for a shared variable's value (the GPU backend's
/// `DeviceTensor`). Devices recognise their own arrays by downcasting ([`DeviceValue::as_any`]).
pub trait DeviceValue: Any + Send + Sync {
    /// The array's shape.
    fn shape(&self) -> &[usize];
    /// A host copy (after the device's queued work).
    fn download(&self) -> Result<Tensor>;
    /// The array as `Any`, for a device to downcast to its own array type.
    fn as_any(&self) -> &dyn Any;
}

/// A device copy of the value.
#[derive(Clone)]
pub struct DeviceCopy {
    /// The array on the device.
    pub value: Arc<dyn DeviceValue>,
    /// Whether it is newer than the host value (which is then stale).
    pub newer: bool,
}

/// See the module doc.
pub struct SharedValue {
    host: RwLock<Tensor>,
    /// Read or changed only under `host`'s lock (see the module doc).
    device: Mutex<Option<DeviceCopy>>,
}

impl std::fmt::Debug for SharedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let newer = self.slot().as_ref().is_some_and(|c| c.newer);
        f.debug_struct("SharedValue")
            .field("device_newer", &newer)
            .finish_non_exhaustive()
    }
}

impl SharedValue {
    /// A shared variable's storage holding `value` on the host, with no device copy.
    pub fn new(value: Tensor) -> SharedCell {
        Arc::new(SharedValue {
            host: RwLock::new(value),
            device: Mutex::new(None),
        })
    }

    fn slot(&self) -> MutexGuard<'_, Option<DeviceCopy>> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn host_write(&self) -> RwLockWriteGuard<'_, Tensor> {
        self.host.write().unwrap_or_else(|e| e.into_inner())
    }

    fn host_read(&self) -> RwLockReadGuard<'_, Tensor> {
        self.host.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies a newer device value into `host` (held exclusively); the copy stays as a cache
    /// of the same value. On an error nothing changes.
    fn copy_back(&self, host: &mut Tensor) -> Result<()> {
        let mut slot = self.slot();
        if let Some(copy) = slot.as_mut().filter(|c| c.newer) {
            *host = copy.value.download().map_err(|e| {
                Error::Runtime(format!(
                    "a shared variable's value on the device could not be copied back: {e}"
                ))
            })?;
            copy.newer = false;
        }
        Ok(())
    }

    /// The value, read in host memory (copied back first where the device's is newer). Errs
    /// only where that copy fails (the device failed).
    pub fn read(&self) -> Result<RwLockReadGuard<'_, Tensor>> {
        loop {
            let g = self.host_read();
            if !self.slot().as_ref().is_some_and(|c| c.newer) {
                return Ok(g);
            }
            drop(g);
            // A device call may update it again between these two locks: check again.
            self.copy_back(&mut self.host_write())?;
        }
    }

    /// The value for writing in host memory (copied back first where the device's is newer;
    /// the device copy is dropped, as the caller may change the value).
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, Tensor>> {
        let mut g = self.host_write();
        self.copy_back(&mut g)?;
        *self.slot() = None;
        Ok(g)
    }

    /// The value held exclusively in host memory, a newer device value copied back first
    /// (the device copy stays, as a cache of the same value): for a reader that must see
    /// several variables at one moment, holding each of them while it reads the others.
    pub fn hold(&self) -> Result<RwLockWriteGuard<'_, Tensor>> {
        let mut g = self.host_write();
        self.copy_back(&mut g)?;
        Ok(g)
    }

    /// A copy of the value (see [`SharedValue::read`]).
    pub fn value(&self) -> Result<Tensor> {
        self.read().map(|g| g.clone())
    }

    /// Replaces the value (nothing is copied back: the old value is gone).
    pub fn set(&self, value: Tensor) {
        let mut g = self.host_write();
        *self.slot() = None;
        *g = value;
    }

    /// The value for a device backend's call: exclusively when the call updates it
    /// (`update`), else shared with other readers. `donated` (with `update`): the call may
    /// write the update over the old value's device buffer ([`DeviceLock::take_device`]).
    pub fn lock_device(&self, update: bool, donated: bool) -> DeviceLock<'_> {
        let host = match update {
            true => HostGuard::Write(self.host_write()),
            false => HostGuard::Read(self.host_read()),
        };
        DeviceLock {
            cell: self,
            host,
            donated: update && donated,
            stale: false,
        }
    }
}

/// A host value held for reading or for writing (`Function`'s calls hold their variables so).
pub(crate) enum HostGuard<'a> {
    Read(RwLockReadGuard<'a, Tensor>),
    Write(RwLockWriteGuard<'a, Tensor>),
}

impl HostGuard<'_> {
    pub(crate) fn tensor(&self) -> &Tensor {
        match self {
            HostGuard::Read(g) => g,
            HostGuard::Write(g) => g,
        }
    }
}

/// A shared variable held for a device backend's call ([`SharedValue::lock_device`]).
pub struct DeviceLock<'a> {
    cell: &'a SharedValue,
    host: HostGuard<'a>,
    donated: bool,
    /// Whether a device copy newer than the host value was taken out and is not back.
    stale: bool,
}

impl DeviceLock<'_> {
    /// The device copy, if there is one (newer than the host value, or equal to it).
    pub fn device(&self) -> Option<DeviceCopy> {
        self.cell.slot().clone()
    }

    /// The device copy where it is newer than the host value.
    fn newer(&self) -> Option<DeviceCopy> {
        self.device().filter(|c| c.newer)
    }

    /// The shape of the value.
    pub fn shape(&self) -> Vec<usize> {
        match self.newer() {
            Some(copy) => copy.value.shape().to_vec(),
            None => self.host.tensor().shape().to_vec(),
        }
    }

    /// The value: the host's, or the device copy's brought back.
    pub fn value(&self) -> Result<std::borrow::Cow<'_, Tensor>> {
        match self.newer() {
            Some(copy) => copy.value.download().map(std::borrow::Cow::Owned),
            None => Ok(std::borrow::Cow::Borrowed(self.host.tensor())),
        }
    }

    /// Keeps `copy`, a copy of the current value on a device, for the next calls (where the
    /// slot holds no copy yet).
    pub fn cache(&self, copy: Arc<dyn DeviceValue>) {
        let mut slot = self.cell.slot();
        if slot.is_none() {
            *slot = Some(DeviceCopy {
                value: copy,
                newer: false,
            });
        }
    }

    /// Makes `value`, on a device, the variable's new value (the host's is stale from now
    /// on). Only for a variable locked for an update.
    pub fn update(&mut self, value: Arc<dyn DeviceValue>) -> Result<()> {
        self.check_write("updated")?;
        *self.cell.slot() = Some(DeviceCopy { value, newer: true });
        self.stale = false;
        Ok(())
    }

    fn check_write(&self, what: &str) -> Result<()> {
        match self.host {
            HostGuard::Read(_) => Err(Error::Runtime(format!(
                "a shared variable locked for reading was {what}"
            ))),
            HostGuard::Write(_) => Ok(()),
        }
    }

    /// Whether the call may write the variable's update over its old value's device buffer
    /// (the function's in-place pass overwrites it: `SharedBinding::donated`).
    pub fn donated(&self) -> bool {
        self.donated
    }

    /// The dtype of the value.
    pub fn dtype(&self) -> crate::ir::DType {
        self.host.tensor().dtype()
    }

    /// Takes the device copy out of the variable, for a call that may write over it (a
    /// donated variable): the call holds the only handle to it, and gives it back with
    /// [`DeviceLock::put_back`] or is replaced with [`DeviceLock::update`]. Meanwhile the
    /// variable has no device copy (its host value is stale where the copy was newer).
    pub fn take_device(&mut self) -> Result<Option<DeviceCopy>> {
        if !self.donated {
            return Err(Error::Runtime(
                "a shared variable not donated to the call was taken from".into(),
            ));
        }
        let copy = self.cell.slot().take();
        self.stale |= copy.as_ref().is_some_and(|c| c.newer);
        Ok(copy)
    }

    /// Gives back the device copy taken with [`DeviceLock::take_device`] (a call that failed
    /// before writing over it): `value`, newer than the host value where the copy was.
    pub fn put_back(&mut self, value: Arc<dyn DeviceValue>) {
        let newer = std::mem::take(&mut self.stale);
        *self.cell.slot() = Some(DeviceCopy { value, newer });
    }

    /// After a failed call, for a variable whose device copy was taken and not given back:
    /// where that copy was newer than the host value, the value becomes zeros of its shape
    /// (the variable never reads a stale value as if it were current) and this returns
    /// `true`; otherwise the host value is the value, and nothing changes.
    pub fn lose(&mut self) -> bool {
        let HostGuard::Write(g) = &mut self.host else {
            return false;
        };
        if !self.stale {
            return false;
        }
        **g = Tensor::zeros(g.dtype(), g.shape());
        *self.cell.slot() = None;
        self.stale = false;
        true
    }
}
