//! Results too large for memory are errors, not aborts. Rust aborts the process when an
//! allocation fails, and the arrays a step allocates are made inside `perform`, ndarray and
//! the kernels, so before a step runs the VM works out the size of each result it can (from
//! the types, or from the run-time shapes of an elementwise step's or a product's operands)
//! and, for large ones, asks the allocator whether that much can be had: a request beyond
//! what the machine can give fails at once, and the call returns an error naming the value
//! instead of taking the process down.

use crate::error::Error;
use crate::ir::{Func, Op, Value};
use crate::lower::{Kernel, Step};
use smallvec::SmallVec;

/// Results at least this large are checked with the allocator (a probe is a map and an unmap
/// of untouched memory; smaller requests are left to fail, if ever, as Rust fails them).
pub(super) const PROBE_BYTES: usize = 1 << 28;

type Shape = SmallVec<[usize; 6]>;

/// The shape of `step`'s result `k` as far as it is known before the step runs, or why it
/// cannot be allocated (its element count overflows).
fn result_shape(
    func: &Func,
    step: &Step,
    k: usize,
    arg_shape: &dyn Fn(Value) -> Option<Shape>,
) -> Option<Result<Shape, String>> {
    let r = *step.results.get(k)?;
    if let Some(s) = func.ty(r).known_shape() {
        return Some(Ok(s.into()));
    }
    let args: Option<Vec<Shape>> = step.args.iter().map(|&a| arg_shape(a)).collect();
    let args = args?;
    let elementwise = matches!(step.kernel, Kernel::Map { .. }) || step.op.is_elementwise();
    if elementwise {
        let mut out: Vec<usize> = Vec::new();
        for s in &args {
            out = crate::ir::broadcast_shapes(&out, s).ok()?;
        }
        return Some(Ok(out.into()));
    }
    if step.op == Op::MatMul && args.len() >= 2 && args[0].len() >= 2 && args[1].len() >= 2 {
        let (a, b) = (&args[0], &args[1]);
        let batch = crate::ir::broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).ok()?;
        let mut out: Shape = batch.into();
        out.push(a[a.len() - 2]);
        out.push(b[b.len() - 1]);
        return Some(Ok(out));
    }
    // The op's shape function on the run-time shapes (the built-in ops' type inference, a
    // custom op's `infer_shape`): a `?` dim sized at run time (a padded convolution, a deep
    // `one_hot`, a `take` of many indices) is checked as a known one is.
    let dtypes: Vec<_> = step.args.iter().map(|&a| func.ty(a).dtype).collect();
    let shapes: Vec<&[usize]> = args.iter().map(|s| s.as_slice()).collect();
    match crate::ir::infer_shape(&step.op, &dtypes, &shapes) {
        Ok(mut outs) => (k < outs.len()).then(|| Ok(outs.swap_remove(k).into())),
        // A shape too large to count is too large to allocate.
        Err(e) if e.contains(crate::ir::infer::TOO_MANY_ELEMENTS) => Some(Err(e)),
        // Whatever else is wrong, the step itself says.
        Err(_) => None,
    }
}

/// Checks that `step`'s results can be allocated (see the module docs).
pub(super) fn check_fits(
    func: &Func,
    step: &Step,
    arg_shape: &dyn Fn(Value) -> Option<Shape>,
) -> Result<(), Error> {
    if matches!(step.kernel, Kernel::IfElse { .. } | Kernel::Scan { .. }) {
        return Ok(());
    }
    for k in 0..step.results.len() {
        // Most results have a known type small enough to need no probe: no work past this.
        let ty = func.ty(step.results[k]);
        let known_bytes = ty
            .shape
            .iter()
            .try_fold(ty.dtype.size(), |n, d| n.checked_mul((*d)?));
        if known_bytes.is_some_and(|b| b < PROBE_BYTES) {
            continue;
        }
        let shape = match result_shape(func, step, k, arg_shape) {
            None => continue,
            Some(Ok(shape)) => shape,
            Some(Err(e)) => return Err(Error::Runtime(e)),
        };
        let r = step.results[k];
        let size = func.ty(r).dtype.size();
        let bytes = shape
            .iter()
            .try_fold(size, |n, &d| n.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize);
        if !can_allocate(bytes) {
            let need = need_text(bytes);
            return Err(Error::Runtime(format!(
                "{}: its result {} of shape {:?} ({}) needs {need}, more than can be allocated",
                step.op.display_name(),
                func.describe(r),
                shape.as_slice(),
                func.ty(r).dtype,
            )));
        }
    }
    Ok(())
}

/// Whether `bytes` (`None`: more than a `usize` counts) can be allocated: large requests are
/// asked of the allocator (a map and an unmap of untouched memory) and, where the system says
/// how much memory is left, must fit in it.
///
/// The allocator alone is not enough: Linux overcommits, so a map of 16 GB on a machine with
/// 12 GB free succeeds, and the process is killed (SIGKILL, no error) only when the result is
/// filled. So a request must also fit in what the kernel reports it could still give
/// (`MemAvailable`, which counts the cache it can drop, plus free swap) and in what this
/// process's cgroup limit leaves. Threads that each allocate at once can still, together,
/// take more than is left: each is checked alone.
pub fn can_allocate(bytes: Option<usize>) -> bool {
    match bytes.filter(|&b| b <= isize::MAX as usize) {
        None => false,
        Some(b) if b >= PROBE_BYTES => {
            if memory_left().is_some_and(|left| b > left) {
                return false;
            }
            let mut probe: Vec<u8> = Vec::new();
            probe.try_reserve_exact(b).is_ok()
        }
        Some(_) => true,
    }
}

/// Bytes the system could still give this process (see [`can_allocate`]), or `None` where it
/// does not say (a system without `/proc/meminfo`).
fn memory_left() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = |key: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    let mut left = kb("MemAvailable:")?.saturating_add(kb("SwapFree:").unwrap_or(0)) * 1024;
    if let Some(cgroup) = cgroup_left() {
        left = left.min(cgroup);
    }
    Some(usize::try_from(left).unwrap_or(usize::MAX))
}

/// What this process's cgroup memory limit leaves, where it has one (cgroup v2's
/// `memory.max`, v1's `memory.limit_in_bytes`; a system may mount both, and "max" or a
/// missing file means no limit there).
fn cgroup_left() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let root = std::path::Path::new("/sys/fs/cgroup");
    let left = |dir: std::path::PathBuf, max: &str, current: &str| -> Option<u64> {
        let read = |name: &str| -> Option<u64> {
            std::fs::read_to_string(dir.join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(read(max)?.saturating_sub(read(current)?))
    };
    let v2 = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .and_then(|p| {
            let dir = root.join(p.trim().trim_start_matches('/'));
            left(dir, "memory.max", "memory.current")
        });
    let v1 = own
        .lines()
        .find_map(|l| l.split_once(":memory:"))
        .and_then(|(_, p)| {
            let dir = root.join("memory").join(p.trim().trim_start_matches('/'));
            left(dir, "memory.limit_in_bytes", "memory.usage_in_bytes")
        });
    v2.into_iter().chain(v1).min()
}
/// Checks that a host array of `dtype` and `shape` can be allocated before it is made: a copy
/// to the host of a device's view (a broadcast costs a device nothing until it is copied out)
/// is the one host array no step's check has seen.
pub fn check_host_array(dtype: crate::ir::DType, shape: &[usize], what: &str) -> Result<(), Error> {
    let bytes = array_bytes(dtype, shape);
    if can_allocate(bytes) {
        return Ok(());
    }
    Err(Error::Runtime(format!(
        "{what} of shape {shape:?} ({dtype}) needs {}, more than can be allocated",
        need_text(bytes)
    )))
}

/// The bytes an array of `dtype` and `shape` takes; `None` where that overflows an address.
pub fn array_bytes(dtype: crate::ir::DType, shape: &[usize]) -> Option<usize> {
    (shape.iter()).try_fold(dtype.size(), |n, &d| n.checked_mul(d))
}

/// `bytes` for an error: `12.3 GB`.
pub(super) fn need_text(bytes: Option<usize>) -> String {
    match bytes {
        Some(b) => format!("{:.1} GB", b as f64 / 1e9),
        None => "more bytes than an address holds".into(),
    }
}

/// Checks, after a scan's first step, that its stacked output `j` (`len` entries like
/// `entry`, of `dtype`) can be allocated: the entries would otherwise pile up step by step
/// until memory runs out.
pub(super) fn check_stacked<D: super::device::Device>(
    device: &D,
    j: usize,
    len: usize,
    entry: &[usize],
    dtype: crate::ir::DType,
) -> Result<(), Error> {
    let bytes = array_bytes(dtype, entry).and_then(|b| b.checked_mul(len));
    match device.can_allocate(bytes) {
        true => Ok(()),
        false => Err(Error::Runtime(format!(
            "scan: stacked output {j} ({len} steps of {dtype} {entry:?}) needs {}, more than can be allocated",
            need_text(bytes)
        ))),
    }
}
