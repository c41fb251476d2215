//! Bytes in: whatever the front end is given, it answers with a program or with
//! diagnostics, never a panic; a program it accepts also derives its rules and compiles
//! to native code.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(program) = mcir::Program::compile("fuzz.mcir", text) else { return };
    if let Ok(derived) = program.differentiate(&mcir::AdOptions::default()) {
        if let Err(e) = mcir_jit::Jit::compile(derived.module()) {
            panic!("a derived module that verifies failed to compile: {e:?}");
        }
    }
});
