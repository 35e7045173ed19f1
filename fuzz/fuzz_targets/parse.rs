//! Fuzzes the text-form parser and verifier: they must never panic, and whatever parses must
//! print, reparse, and print the same again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    if let Ok(funcs) = kiln::ir::text::parse("fuzz", &src) {
        for f in &funcs {
            let text = kiln::ir::text::print_func(f);
            let again = kiln::ir::text::parse("reprint", &text).expect("printed text parses");
            assert_eq!(kiln::ir::text::print_func(&again[0]), text);
        }
    }
});
