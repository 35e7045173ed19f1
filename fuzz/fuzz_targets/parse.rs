//! Fuzzes the text-form parser and verifier: they must never panic or overflow the stack, and
//! whatever parses must print, reparse, and print the same again.
//!
//! Inputs starting with `N` are expanded before parsing, so that short inputs reach deep
//! nesting (libFuzzer's inputs are a few kilobytes): `N`, two bytes of depth (little-endian,
//! up to 65535), a byte choosing the construct (nested constant lists, nested attribute lists,
//! nested `ifelse` regions), then the text placed at the innermost level.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The text an `N` input stands for.
fn expand(data: &[u8]) -> Option<String> {
    let (&[b'N', lo, hi, kind], rest) = (data.first_chunk::<4>()?, &data[4..]) else {
        return None;
    };
    let depth = u16::from_le_bytes([lo, hi]) as usize;
    let inner = String::from_utf8_lossy(rest);
    Some(match kind % 3 {
        0 => format!(
            "func @f() -> (f32[]) {{\n  %c = const {}{inner}{} : f32[]\n  return %c\n}}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        1 => format!(
            "func @f(%x: f32[2]) -> (f32[2]) {{\n  %y = transpose %x {{perm = {}{inner}{}}}\n  return %y\n}}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        _ => {
            let mut s = String::from("func @f(%c: bool[], %x: f32[2]) -> (f32[2]) {\n");
            for d in 0..depth {
                s.push_str(&format!("%r{d} = ifelse %c {{\n"));
            }
            s.push_str(&format!("{inner}\nyield %x\n"));
            for d in (0..depth).rev() {
                s.push_str(&format!("}} else {{\nyield %x\n}}\nyield %r{d}\n"));
            }
            s.push_str("return %x\n}\n");
            s
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let src = expand(data).unwrap_or_else(|| String::from_utf8_lossy(data).into_owned());
    if let Ok(funcs) = kiln::ir::text::parse("fuzz", &src) {
        for f in &funcs {
            let text = kiln::ir::text::print_func(f);
            let again = kiln::ir::text::parse("reprint", &text).expect("printed text parses");
            assert_eq!(kiln::ir::text::print_func(&again[0]), text);
        }
    }
});
