//! The `mcc` binary: runs the command line of `mcir_cli` and exits with its status.

use std::io::Write;

fn main() {
    let outcome = mcir_cli::run(std::env::args_os().collect(), &mut std::io::stdin());
    let _ = std::io::stdout().write_all(outcome.stdout.as_bytes());
    // The report first, then the error line that sums it up.
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(outcome.stderr.as_bytes());
    std::process::exit(outcome.code);
}
