//! `.npy` files in and out, for the command-line tool and for programs that keep arrays on
//! disk: reading checks the header against the file before anything is allocated (a header
//! may claim any shape) and reads no more than the header or an archive's directory declares
//! (a file may be a stream, an entry may inflate without end), every error is one line, and writing several files is all or
//! nothing (each goes to a temporary file first; the temporary files, and the finished ones
//! of an incomplete set, are removed on failure or by [`remove_unfinished`] from a signal
//! handler).
//!
//! The format (numpy's `format.py`): the magic `\x93NUMPY`, a version byte pair, the header's
//! length (2 bytes in version 1, 4 in 2 and 3), then a Python dict literal with `descr`,
//! `fortran_order` and `shape`, then the data. Written by hand rather than through
//! `ndarray-npy`, whose reader allocates what the header claims before reading the data and
//! whose errors span several lines.

use crate::error::{Error, Result};
use crate::ir::DType;
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The fields of a header that matter here.
#[derive(Clone, Debug, PartialEq)]
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<usize>,
}

fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {msg}", path.display()))
}

/// The `descr` numpy writes for `dtype` (little-endian); `bf16` has none (numpy has no
/// bfloat16; `ml_dtypes` writes it as raw `<V2`, which could be any 2-byte type).
fn descr_of(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "|b1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::BF16 => return None,
    })
}

/// The error of a `.npy` file for a dtype numpy has no spelling of.
fn no_descr(dtype: DType) -> String {
    format!("numpy has no {dtype} dtype: cast to f32 for .npy files")
}

/// The header and the offset of the data.
fn parse_header(bytes: &[u8]) -> std::result::Result<(Header, usize), String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not an .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or("the header runs past the end of the file")?;
    let text = std::str::from_utf8(&bytes[start..end]).map_err(|_| "the header is not text")?;
    Ok((parse_dict(text.trim())?, end))
}

/// Parses the header's dict literal: `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
fn parse_dict(text: &str) -> std::result::Result<Header, String> {
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.trim_end().strip_suffix('}'))
        .ok_or("the header is not a dict")?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let (key, after) = quoted(rest).ok_or("a header key is not a quoted string")?;
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or("a header key has no value")?
            .trim_start();
        let after = match key.as_str() {
            "descr" => {
                let (v, a) = quoted(after).ok_or("`descr` is not a string")?;
                descr = Some(v);
                a
            }
            "fortran_order" => {
                let (v, a) = if let Some(a) = after.strip_prefix("True") {
                    (true, a)
                } else if let Some(a) = after.strip_prefix("False") {
                    (false, a)
                } else {
                    return Err("`fortran_order` is not True or False".into());
                };
                fortran = Some(v);
                a
            }
            "shape" => {
                let body = after.strip_prefix('(').ok_or("`shape` is not a tuple")?;
                let close = body.find(')').ok_or("`shape` is not a tuple")?;
                let dims: std::result::Result<Vec<usize>, String> = body[..close]
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(|d| {
                        d.trim_end_matches('L')
                            .parse::<usize>()
                            .map_err(|_| format!("`shape` holds `{d}`, not a size"))
                    })
                    .collect();
                shape = Some(dims?);
                &body[close + 1..]
            }
            other => return Err(format!("unknown header key `{other}`")),
        };
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Ok(Header {
        descr: descr.ok_or("the header has no `descr`")?,
        fortran: fortran.ok_or("the header has no `fortran_order`")?,
        shape: shape.ok_or("the header has no `shape`")?,
    })
}

/// A `'...'` or `"..."` string at the start of `s`, and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let q = s.chars().next().filter(|&c| c == '\'' || c == '"')?;
    let end = s[1..].find(q)? + 1;
    Some((s[1..end].to_string(), &s[end + 1..]))
}

/// The dtype of a header's `descr` (numpy's spellings of kiln's dtypes, little-endian).
fn dtype_of(descr: &str) -> Option<DType> {
    Some(match descr {
        // A byte has no order: numpy writes `|b1`, and `<b1`, `>b1` and `b1` mean the same.
        "|b1" | "<b1" | ">b1" | "b1" => DType::Bool,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        "<f4" => DType::F32,
        "<f8" => DType::F64,
        "<f2" => DType::F16,
        _ => return None,
    })
}

/// The longest header read (numpy writes a few dozen bytes for the dtypes kiln reads, and
/// its own reader refuses headers over 10,000 bytes by default).
const MAX_HEADER: usize = 1 << 16;

/// Reads an array of `dtype` from the `.npy` file at `path`. Only what the header declares
/// is read: the header first (bounded), then exactly the data its shape needs, so a file
/// that is a stream (a FIFO, `/dev/zero`) or that holds more than its header says is an
/// error after at most that much, never a read that does not end.
pub fn read(path: &Path, dtype: DType) -> Result<Tensor> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
    let regular_len = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let mut r = std::io::BufReader::new(file);
    let mut bytes = vec![0u8; 10];
    read_exactly(path, &mut r, &mut bytes, "the file ends inside the header")?;
    if &bytes[..6] != MAGIC {
        return Err(err(path, "not an .npy file (no \\x93NUMPY magic)"));
    }
    let header_len = match bytes[6] {
        1 => u16::from_le_bytes([bytes[8], bytes[9]]) as usize,
        2 | 3 => {
            bytes.resize(12, 0);
            read_exactly(
                path,
                &mut r,
                &mut bytes[10..],
                "the file ends inside the header",
            )?;
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
        }
        v => return Err(err(path, format!("unsupported .npy version {v}"))),
    };
    if header_len > MAX_HEADER {
        return Err(err(
            path,
            format!("the header claims {header_len} bytes, more than the {MAX_HEADER} read"),
        ));
    }
    let start = bytes.len();
    bytes.resize(start + header_len, 0);
    read_exactly(
        path,
        &mut r,
        &mut bytes[start..],
        "the file ends inside the header",
    )?;
    let (h, data_at) = parse_header(&bytes).map_err(|e| err(path, e))?;
    let need = data_bytes(path, &h, element_dtype(path, &h, Some(dtype))?)?;
    if let Some(len) = regular_len {
        if len != (data_at + need) as u64 {
            return Err(err(
                path,
                format!(
                    "the header's shape {:?} needs {need} bytes of data, the file holds {}",
                    h.shape,
                    len.saturating_sub(data_at as u64)
                ),
            ));
        }
    }
    reserve(path, &mut bytes, need)?;
    bytes.resize(data_at + need, 0);
    read_exactly(
        path,
        &mut r,
        &mut bytes[data_at..],
        &format!(
            "the header's shape {:?} needs {need} bytes of data, the file ends before",
            h.shape
        ),
    )?;
    if r.read(&mut [0u8]).map_err(|e| err(path, e))? != 0 {
        return Err(err(
            path,
            format!(
                "the file holds more than the {need} bytes of data the header's shape {:?} needs",
                h.shape
            ),
        ));
    }
    from_bytes(path, &bytes, Some(dtype))
}

/// Fills `buf` from `r`, or fails with `short` where the stream ends first.
fn read_exactly(
    path: &Path,
    r: &mut impl std::io::Read,
    buf: &mut [u8],
    short: &str,
) -> Result<()> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => err(path, short),
        _ => err(path, e),
    })
}

/// Room for `more` bytes in `bytes`, or an error where the allocator cannot give them (Rust
/// aborts on a failed allocation; this asks first).
fn reserve(path: &Path, bytes: &mut Vec<u8>, more: usize) -> Result<()> {
    bytes.try_reserve_exact(more).map_err(|_| {
        err(
            path,
            format!(
                "needs {:.1} GB, more than can be allocated",
                more as f64 / 1e9
            ),
        )
    })
}

/// The dtype of the elements a header declares, which must be `dtype` where one is asked
/// for.
fn element_dtype(path: &Path, h: &Header, dtype: Option<DType>) -> Result<DType> {
    let dtype = match dtype.or_else(|| dtype_of(&h.descr)) {
        Some(d) => d,
        None => {
            return Err(err(
                path,
                format!("holds `{}` elements, which kiln has no dtype for", h.descr),
            ))
        }
    };
    let Some(want) = descr_of(dtype) else {
        return Err(err(path, no_descr(dtype)));
    };
    if h.descr != want {
        let also = matches!(
            (dtype, h.descr.as_str()),
            (DType::Bool, "<b1" | ">b1" | "b1")
        );
        if !also {
            return Err(err(
                path,
                format!(
                    "holds `{}` elements where {dtype} (`{}`) is expected",
                    h.descr, want
                ),
            ));
        }
    }
    Ok(dtype)
}

/// The bytes of data a header of `dtype` elements declares (checked: a shape whose size
/// overflows is an error).
fn data_bytes(path: &Path, h: &Header, dtype: DType) -> Result<usize> {
    h.shape
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            err(
                path,
                format!("the header's shape {:?} is too large", h.shape),
            )
        })
}

/// Reads the `.npy` data in `bytes` (named `path` in errors), of `dtype` or, with `None`, of
/// the dtype its header says.
pub fn from_bytes(path: &Path, bytes: &[u8], dtype: Option<DType>) -> Result<Tensor> {
    let (h, data_at) = parse_header(bytes).map_err(|e| err(path, e))?;
    let dtype = element_dtype(path, &h, dtype)?;
    let data = &bytes[data_at..];
    let need = data_bytes(path, &h, dtype)?;
    if need != data.len() {
        return Err(err(
            path,
            format!(
                "the header's shape {:?} needs {need} bytes of data, the file holds {}",
                h.shape,
                data.len()
            ),
        ));
    }
    let shape = IxDyn(&h.shape).set_f(h.fortran);
    let bad = |e: ndarray::ShapeError| err(path, e);
    macro_rules! decode {
        ($t:ty, $v:ident, $n:expr) => {{
            let xs: Vec<$t> = data
                .chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks of the element size")))
                .collect();
            Tensor::$v(ArrayD::from_shape_vec(shape, xs).map_err(bad)?)
        }};
    }
    Ok(match dtype {
        DType::Bool => {
            if let Some(b) = data.iter().find(|&&b| b > 1) {
                return Err(err(path, format!("a bool element holds the byte {b}")));
            }
            let xs: Vec<bool> = data.iter().map(|&b| b == 1).collect();
            Tensor::Bool(ArrayD::from_shape_vec(shape, xs).map_err(bad)?)
        }
        DType::I32 => decode!(i32, I32, 4),
        DType::I64 => decode!(i64, I64, 8),
        DType::F32 => decode!(f32, F32, 4),
        DType::F64 => decode!(f64, F64, 8),
        DType::F16 => decode!(half::f16, F16, 2),
        DType::BF16 => unreachable!("bf16 has no descr (refused above)"),
    })
}

/// The header of `t`'s `.npy` file (version 1, C order), `None` for a dtype numpy lacks.
fn header_of(t: &Tensor) -> Option<Vec<u8>> {
    let shape: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.join(", ")),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr_of(t.dtype())?
    );
    // Magic, version, length and header padded with spaces to a multiple of 64, ending in \n.
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(header.len() + 10);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    Some(out)
}

/// Writes `t` as an `.npy` file to `w`, through a buffer: each system call writes a few
/// megabytes, so a signal that ends the process is handled within one of them, not after
/// the whole array.
pub fn write_to(w: impl std::io::Write, t: &Tensor) -> std::io::Result<()> {
    use std::io::Write;
    let header = header_of(t).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, no_descr(t.dtype()))
    })?;
    let mut w = std::io::BufWriter::with_capacity(1 << 22, w);
    w.write_all(&header)?;
    macro_rules! encode {
        ($a:expr) => {
            for x in $a.iter() {
                w.write_all(&x.to_le_bytes())?;
            }
        };
    }
    match t {
        Tensor::Bool(a) => encode!(a.mapv(u8::from)),
        Tensor::I32(a) => encode!(a),
        Tensor::I64(a) => encode!(a),
        Tensor::F32(a) => encode!(a),
        Tensor::F64(a) => encode!(a),
        Tensor::F16(a) => encode!(a),
        Tensor::BF16(a) => encode!(a),
    }
    w.flush()
}

/// The bytes of `t` as a version 1 `.npy` file (C order).
/// Errors only for a dtype numpy has no spelling of (`bf16`).
pub fn to_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_to(&mut out, t).map_err(|e| Error::Input(e.to_string()))?;
    Ok(out)
}

/// Entry `name` of the archive at `path` as `.npy` bytes; an error (a `bf16` array) names the
/// archive and the entry, as the readers' errors do.
pub(crate) fn entry_bytes(path: &Path, name: &str, t: &Tensor) -> Result<Vec<u8>> {
    to_bytes(t).map_err(|e| match e {
        Error::Input(m) => Error::Input(format!("{}/{name}.npy: {m}", path.display())),
        e => e,
    })
}

/// Files of a write in progress: temporary files, and the finished files of a set not yet
/// complete. A signal handler removes them with [`remove_unfinished`].
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn unfinished() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    UNFINISHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes the files of writes in progress (for a signal handler that ends the process: no
/// half-written file and no incomplete set stays behind). Later writes in this process fail.
pub fn remove_unfinished() {
    let mut files = unfinished();
    for f in files.drain(..) {
        let _ = std::fs::remove_file(f);
    }
    // Held until the process ends: a write that has not registered its files yet waits, and a
    // rename cannot slip in after the removal.
    std::mem::forget(files);
}

/// Writes every `(path, array)` as an `.npy` file, all or nothing: each is written whole to a
/// temporary file next to it, then all are renamed into place; after a failure none of the
/// paths holds a new file (an old file at one of them may be gone).
pub fn write_all(files: &[(PathBuf, &Tensor)]) -> Result<()> {
    let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    write_whole(&paths, |i, f| write_to(f, files[i].1))
}

/// Writes `entries` as the `.npz` file `path` (numpy's `savez`: a zip archive of
/// `NAME.npy` files, stored), whole or not at all; `np.load(path)[NAME]` reads an entry.
pub fn write_npz(path: &Path, entries: &[(String, &Tensor)]) -> Result<()> {
    let files: Vec<(String, Vec<u8>)> = entries
        .iter()
        .map(|(name, t)| Ok((format!("{name}.npy"), entry_bytes(path, name, t)?)))
        .collect::<Result<_>>()?;
    write_archive(path, &files)
}

/// The entries of the `.npz` file at `path` (stored or deflated, as `np.savez` and
/// `np.savez_compressed` write them), by name without `.npy`, each of the dtype its header
/// says.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>> {
    arrays_of(path, read_archive(path)?)
}

/// The `.npy` files among `files` (read from the archive `path`) as arrays, by name without
/// `.npy`; any other file is an error.
pub fn arrays_of(path: &Path, files: Vec<(String, Vec<u8>)>) -> Result<Vec<(String, Tensor)>> {
    files
        .into_iter()
        .map(|(name, bytes)| {
            let key = name
                .strip_suffix(".npy")
                .ok_or_else(|| err(path, format!("the entry `{name}` is not an .npy file")))?;
            Ok((
                key.to_string(),
                from_bytes(&path.join(&name), &bytes, None)?,
            ))
        })
        .collect()
}

/// Writes `files` (name, contents) as the zip archive `path`, entries stored, whole or not
/// at all.
pub fn write_archive(path: &Path, files: &[(String, Vec<u8>)]) -> Result<()> {
    use std::io::Write;
    use zip::write::SimpleFileOptions;
    write_whole(&[path.to_path_buf()], |_, f| {
        let mut zip = zip::ZipWriter::new(std::io::BufWriter::new(f));
        for (name, bytes) in files {
            let options = SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored)
                .large_file(bytes.len() >= u32::MAX as usize);
            zip.start_file(name.as_str(), options)
                .map_err(std::io::Error::other)?;
            zip.write_all(bytes)?;
        }
        zip.finish().map_err(std::io::Error::other)?.flush()
    })
}

/// The files of the zip archive at `path` (stored or deflated), in order.
pub fn read_archive(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| err(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| err(path, e))?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| err(path, e))?;
        let name = entry.name().to_string();
        let at = path.join(&name);
        // Only what the directory declares is read, and it must be all there is: a damaged
        // or hostile archive may declare anything, and an entry may inflate to far more (a
        // few megabytes of deflated zeros make gigabytes).
        let declared = entry.size();
        let want = usize::try_from(declared)
            .ok()
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| err(&at, format!("declares {declared} bytes, too many")))?;
        let mut bytes = Vec::new();
        reserve(&at, &mut bytes, want)?;
        entry
            .take(declared.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| err(&at, e))?;
        if bytes.len() != want {
            return Err(err(
                &at,
                format!(
                    "holds {} bytes where the archive's directory declares {declared}",
                    match bytes.len() > want {
                        true => "more".to_string(),
                        false => bytes.len().to_string(),
                    }
                ),
            ));
        }
        out.push((name, bytes));
    }
    Ok(out)
}

/// Writes each of `paths` whole through `write(i, file)`, all or nothing: each is written to
/// a temporary file next to it, then all are renamed into place; after a failure none of the
/// paths holds a new file (an old file at one of them may be gone). The temporary files are
/// `NAME.tmpPID.N`, `N` counted per process, so that two threads saving to one path at once
/// write files of their own (the last rename wins, whole), and they are listed for
/// [`remove_unfinished`] while they exist.
pub(crate) fn write_whole(
    paths: &[PathBuf],
    write: impl Fn(usize, std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let files: Vec<(&PathBuf, usize)> = paths.iter().zip(0..).collect();
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = |p: &Path| {
        let mut name = p.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp{}.{n}", std::process::id()));
        p.with_file_name(name)
    };
    let temps: Vec<PathBuf> = files.iter().map(|(p, _)| tmp(p)).collect();
    unfinished().extend(temps.iter().cloned());
    let cleanup = |done: &[PathBuf]| {
        let mut list = unfinished();
        for t in temps.iter().chain(done) {
            let _ = std::fs::remove_file(t);
            list.retain(|x| x != t);
        }
    };
    for ((p, i), tp) in files.iter().zip(&temps) {
        let written = std::fs::File::create(tp).and_then(|f| write(*i, f));
        if let Err(e) = written {
            cleanup(&[]);
            return Err(err(p, e));
        }
    }
    let mut done: Vec<PathBuf> = Vec::new();
    for ((p, _), tp) in files.iter().zip(&temps) {
        let renamed = {
            let mut list = unfinished();
            let r = std::fs::rename(tp, p);
            if r.is_ok() {
                list.retain(|x| x != tp);
                list.push((*p).clone());
            }
            r
        };
        if let Err(e) = renamed {
            cleanup(&done);
            return Err(err(p, e));
        }
        done.push((*p).clone());
    }
    unfinished().retain(|x| !done.contains(x));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_in_numpy_spellings() {
        let h = parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }").unwrap();
        assert_eq!(h.shape, vec![2, 3]);
        let h = parse_dict("{'descr': '<i8', 'fortran_order': True, 'shape': (5,)}").unwrap();
        assert!(h.fortran);
        assert_eq!(h.shape, vec![5]);
        let h = parse_dict("{'descr': '|b1', 'fortran_order': False, 'shape': ()}").unwrap();
        assert!(h.shape.is_empty());
        assert!(parse_dict("{'descr': '<f4', 'shape': (2,)}").is_err());
        assert!(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (x,)}").is_err());
        // Every spelling of a bool byte, in a single file as in an archive's entry.
        for descr in ["|b1", "<b1", ">b1", "b1"] {
            assert_eq!(dtype_of(descr), Some(DType::Bool), "{descr}");
        }
        assert_eq!(dtype_of(">f4"), None);
    }

    #[test]
    fn arrays_round_trip() {
        let dir = std::env::temp_dir().join(format!("kiln-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = Tensor::F64(ArrayD::from_shape_fn(IxDyn(&[2, 3]), |i| {
            (i[0] * 3 + i[1]) as f64
        }));
        let p = dir.join("a.npy");
        write_all(&[(p.clone(), &t)]).unwrap();
        assert_eq!(read(&p, DType::F64).unwrap(), t);
        assert!(read(&p, DType::F32).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
