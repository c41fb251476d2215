//! Prints the program (and its arguments, as a `// args:` line) drawn from a seed:
//! `cargo run -p mcir_gen --example print -- SEED`.

fn main() {
    let seed = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let g = mcir_gen::generate(seed);
    println!("// args: {}\n{}", g.args, g.source);
}
