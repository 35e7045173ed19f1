//! Files from elsewhere: a saved function (`.kfn`) whose bindings or state do not fit its
//! function is refused when it is loaded, with one line naming the entry (never loaded to
//! fail, or worse, at every call), and the `.npy`/`.npz` readers read no more than a header
//! or an archive's directory declares.

use kiln::{function, CompileOptions, Function, Graph};
use ndarray::{arr1, Array1};
use std::io::Write;
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The files of an archive: (name, contents).
type Files = Vec<(String, Vec<u8>)>;

/// A saved training-like step: `a: f32[3]`, `b: f64[3]`, `c: f32[4]`, each updated (`a` and
/// all in place), and the files of its `.kfn`.
fn saved_step() -> Files {
    let g = Graph::new();
    let x = g.input("x", kiln::f32, [Some(3)]);
    let a = g.shared("a", arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    let b = g.shared("b", arr1(&[1.0f64, 2.0, 3.0]).into_dyn());
    let c = g.shared("c", Array1::<f32>::zeros(4).into_dyn());
    let loss = (&a * &x).sum(None, false);
    let f = function(&[&x], &[&loss])
        .update(&a, &a - &x * 0.5)
        .update(&b, &b * 2.0)
        .update(&c, &c + 1.0)
        .compile()
        .unwrap();
    let path = tmp("step.kfn");
    f.save(&path).unwrap();
    let files = kiln::npy::read_archive(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    files
}

fn manifest(files: &Files) -> String {
    let (_, m) = files.iter().find(|(n, _)| n == "function.txt").unwrap();
    String::from_utf8(m.clone()).unwrap()
}

/// `Function::load` of `files` with `edit` made: the error's text, or `None` where it loads.
fn load_edited(files: &Files, edit: impl Fn(&mut Files)) -> Option<String> {
    let mut fs = files.clone();
    edit(&mut fs);
    let path = tmp("edited.kfn");
    kiln::npy::write_archive(&path, &fs).unwrap();
    let loaded = Function::load(&path, &CompileOptions::default());
    let _ = std::fs::remove_file(&path);
    loaded.err().map(|e| e.to_string())
}

fn set_manifest(fs: &mut Files, text: &str) {
    let i = fs.iter().position(|(n, _)| n == "function.txt").unwrap();
    fs[i].1 = text.as_bytes().to_vec();
}

#[test]
fn saved_functions_whose_bindings_do_not_fit_are_refused_at_load() {
    let files = saved_step();
    let m = manifest(&files);
    let lines: Vec<&str> = m.lines().collect();
    // As saved: a, b, c updated by results 1, 2, 3, each overwritten in place.
    assert_eq!(
        lines[3..],
        ["shared 1 1 a", "shared 2 1 b", "shared 3 1 c"],
        "{m}"
    );
    assert_eq!(load_edited(&files, |_| {}), None, "the file as saved loads");
    let with_lines = |shared: [&str; 3]| {
        // One fewer update makes result 1 an output.
        let outputs = 4 - shared.iter().filter(|l| !l.contains(" - ")).count();
        let text = format!(
            "{}\n{}\noutputs {outputs}\n{}\n",
            lines[0],
            lines[1],
            shared.join("\n")
        );
        load_edited(&files, |fs| set_manifest(fs, &text))
    };
    let cases: [([&str; 3], &str); 8] = [
        // a (f32) updated by b's f64 result: a read past its buffer before.
        (
            ["shared 2 0", "shared 1 0", "shared 3 1"],
            "result 2 of type f64[3], expected f32[3]",
        ),
        // a (f32[3]) updated by c's f32[4] result.
        (
            ["shared 3 0", "shared 2 0", "shared 1 0"],
            "result 3 of type f32[4], expected f32[3]",
        ),
        // One result for two variables.
        (
            ["shared 1 1", "shared 2 0", "shared 1 0"],
            "result 1 already updates shared variable #0",
        ),
        (
            ["shared 0 0", "shared 2 0", "shared 3 0"],
            "not one of the update results 1..4",
        ),
        (
            ["shared - 1", "shared 2 0", "shared 3 0"],
            "overwritten in place but never updated",
        ),
        (
            ["shared 1 7", "shared 2 0", "shared 3 0"],
            "is not `shared UPDATE|- 0|1 [NAME]`",
        ),
        (
            ["shared 1 0 a\\q", "shared 2 0", "shared 3 0"],
            "is not `shared UPDATE|- 0|1 [NAME]`",
        ),
        (
            ["shared 1 0", "shared 2 0", "shared 9 0"],
            "updated by result 9, not one",
        ),
    ];
    for (shared, want) in cases {
        let e = with_lines(shared).unwrap_or_else(|| panic!("{shared:?} loaded"));
        assert!(e.contains(want), "{shared:?}: {e}");
        assert!(e.contains("edited.kfn") && !e.contains('\n'), "{e}");
    }
}

#[test]
fn saved_functions_whose_state_does_not_fit_are_refused_at_load() {
    let files = saved_step();
    let e = load_edited(&files, |fs| fs.retain(|(n, _)| n != "shared/b.npy")).unwrap();
    assert!(e.contains("no state entry `shared/b`"), "{e}");
    let e = load_edited(&files, |fs| {
        let i = fs.iter().position(|(n, _)| n == "shared/c.npy").unwrap();
        fs[i].1 = kiln::npy::to_bytes(&kiln::Tensor::F32(Array1::zeros(5).into_dyn())).unwrap();
    })
    .unwrap();
    assert!(
        e.contains("shared/c") && e.contains("expected f32[4]"),
        "{e}"
    );
    let e = load_edited(&files, |fs| {
        let t = kiln::npy::to_bytes(&kiln::Tensor::F32(Array1::zeros(3).into_dyn())).unwrap();
        fs.push(("shared/d.npy".into(), t));
    })
    .unwrap();
    assert!(
        e.contains("shared/d") && e.contains("no shared variable"),
        "{e}"
    );
}

#[test]
fn a_saved_parameter_claiming_400_gb_is_refused_without_allocating_it() {
    let g = Graph::new();
    let w = g.shared("w", arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    let f = function(&[], &[&w.sum(None, false)]).compile().unwrap();
    let path = tmp("big.kfn");
    f.save(&path).unwrap();
    let mut files = kiln::npy::read_archive(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let i = files.iter().position(|(n, _)| n == "function.kir").unwrap();
    let kir = String::from_utf8(files[i].1.clone()).unwrap();
    assert!(kir.contains("f32[3]"), "{kir}");
    files[i].1 = kir.replace("f32[3]", "f32[100000, 1000000]").into_bytes();
    for drop_value in [false, true] {
        let e = load_edited(&files, |fs| {
            if drop_value {
                fs.retain(|(n, _)| n != "shared/w.npy");
            }
        })
        .expect("loaded");
        let want = match drop_value {
            false => "expected f32[100000, 1000000]",
            true => "no state entry `shared/w`",
        };
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn npy_files_are_read_no_further_than_their_header_declares() {
    let t = kiln::Tensor::F32(arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    let good = kiln::npy::to_bytes(&t).unwrap();
    let path = tmp("x.npy");
    let read = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        kiln::npy::read(&path, kiln::f32).map_err(|e| e.to_string())
    };
    assert_eq!(read(&good).unwrap(), t);
    // 12 bytes of data and a long tail: refused from the file's size, before reading it.
    let mut long = good.clone();
    long.extend(std::iter::repeat_n(0u8, 1 << 20));
    let e = read(&long).unwrap_err();
    assert!(
        e.contains("needs 12 bytes of data, the file holds 1048588"),
        "{e}"
    );
    let e = read(&good[..good.len() - 1]).unwrap_err();
    assert!(e.contains("needs 12 bytes"), "{e}");
    // A header that claims more than any header needs.
    let mut huge_header = good[..8].to_vec();
    huge_header[6] = 2;
    huge_header.extend((u32::MAX).to_le_bytes());
    let e = read(&huge_header).unwrap_err();
    assert!(e.contains("more than the 65536 read"), "{e}");
    // An endless stream: /dev/zero has no magic; a FIFO that keeps writing after a good
    // array is refused once the array is read.
    let e = kiln::npy::read(std::path::Path::new("/dev/zero"), kiln::f32).unwrap_err();
    assert!(e.to_string().contains("not an .npy file"), "{e}");
    let fifo = tmp("stream.npy");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let writer = {
            let (fifo, good) = (fifo.clone(), good.clone());
            std::thread::spawn(move || {
                let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                let _ = w.write_all(&good);
                // Writes until the reader goes (a broken pipe), at most 64 MiB.
                let chunk = vec![0u8; 1 << 16];
                for _ in 0..1024 {
                    if w.write_all(&chunk).is_err() {
                        break;
                    }
                }
            })
        };
        let e = kiln::npy::read(&fifo, kiln::f32).unwrap_err().to_string();
        assert!(e.contains("holds more than the 12 bytes"), "{e}");
        drop(e);
        writer.join().unwrap();
        let _ = std::fs::remove_file(&fifo);
    }
    let _ = std::fs::remove_file(&path);
}

/// A zip archive of one deflated entry whose local header and directory declare `declared`
/// bytes, holding `data` deflated.
fn zip_declaring(name: &str, data: &[u8], declared: u32) -> Vec<u8> {
    let path = tmp("bomb-src.zip");
    {
        let f = std::fs::File::create(&path).unwrap();
        let mut z = zip::ZipWriter::new(f);
        let o = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        z.start_file(name, o).unwrap();
        z.write_all(data).unwrap();
        z.finish().unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    // The uncompressed size sits 22 bytes into a local header (PK\3\4) and 24 into a
    // directory entry (PK\1\2).
    let real = (data.len() as u32).to_le_bytes();
    for (sig, at) in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)] {
        let i = bytes.windows(4).position(|w| w == sig).unwrap();
        assert_eq!(bytes[i + at..i + at + 4], real);
        bytes[i + at..i + at + 4].copy_from_slice(&declared.to_le_bytes());
    }
    bytes
}

#[test]
fn archive_entries_are_inflated_no_further_than_their_directory_declares() {
    let t = kiln::Tensor::F32(arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    let mut npy = kiln::npy::to_bytes(&t).unwrap();
    let path = tmp("entries.npz");
    let declared = npy.len() as u32;
    std::fs::write(&path, zip_declaring("x.npy", &npy, declared)).unwrap();
    assert_eq!(kiln::npy::read_npz(&path).unwrap()[0].1, t, "as declared");
    // 64 MiB of zeros behind the array, the directory declaring only the array.
    npy.extend(std::iter::repeat_n(0u8, 64 << 20));
    let bomb = zip_declaring("x.npy", &npy, declared);
    assert!(
        bomb.len() < 1 << 20,
        "deflated zeros are small: {}",
        bomb.len()
    );
    std::fs::write(&path, bomb).unwrap();
    let e = kiln::npy::read_npz(&path).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "holds more bytes where the archive's directory declares {declared}"
        )),
        "{e}"
    );
    let fn_path = tmp("bomb.kfn");
    std::fs::copy(&path, &fn_path).unwrap();
    let e = Function::load(&fn_path, &CompileOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("directory declares"), "{e}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&fn_path);
}
