//! Generates the parser from `grammar/mcir.lalrpop` at the workspace root.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let grammar_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../grammar");
    let out_dir = std::env::var("OUT_DIR")?;
    println!("cargo:rerun-if-changed={}", grammar_dir.join("mcir.lalrpop").display());
    lalrpop::Configuration::new()
        .set_in_dir(&grammar_dir)
        .set_out_dir(&out_dir)
        .emit_rerun_directives(true)
        .process()
}
