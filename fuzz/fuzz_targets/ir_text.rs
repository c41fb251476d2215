//! IR text in: the parser answers with a module or an error; a module that verifies
//! prints to text that parses back to the same text, and compiles to native code.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(module) = mcir_ir::parse_module(text) else { return };
    if mcir_ir::verify_module(&module).is_err() {
        return;
    }
    let printed = mcir_ir::print_module(&module);
    let again = match mcir_ir::parse_module(&printed) {
        Ok(m) => m,
        Err(e) => panic!("printed IR does not parse back: {e:?}\n{printed}"),
    };
    assert_eq!(mcir_ir::print_module(&again), printed, "printing is not stable");
    if let Err(e) = mcir_jit::Jit::compile(&module) {
        panic!("verified IR failed to compile: {e:?}\n{printed}");
    }
});
