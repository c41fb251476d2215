//! The `mcc` binary: runs the command line of `mcir_cli` and exits with its status.

use std::io::Write;

// Compiling allocates and frees many small objects (Cranelift's and the IR's); mimalloc
// takes about a seventh off compile times compared with glibc's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`, one of the stable options of `mimalloc.h`, which
/// `libmimalloc-sys` declares no constant for.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // Memory freed while compiling (the IR of each pass, Cranelift's tables) is kept for
    // reuse instead of being given back to the system a second later: pages taken from
    // the system again must be zeroed again, which cost a 10^5-line gradient's compile
    // up to a second in the kernel (docs/performance.md, "Compile time").
    #[allow(unsafe_code)]
    // SAFETY: mimalloc's options may be set at any time, from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, -1)
    };
    let outcome = mcir_cli::run(std::env::args_os().collect(), &mut std::io::stdin());
    let _ = std::io::stdout().write_all(outcome.stdout.as_bytes());
    // The report first, then the error line that sums it up.
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(outcome.stderr.as_bytes());
    std::process::exit(outcome.code);
}
