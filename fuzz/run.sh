#!/usr/bin/env bash
# Runs the fuzz targets, each for a given time, on a corpus seeded from the project's
# own programs. Crashes land in fuzz/artifacts/TARGET/; each one found is kept in
# fuzz/regressions/TARGET/ (replayed by every run) and becomes a test under tests/ or
# crates/*/tests/ (see docs/reliability.md).
#
#   fuzz/run.sh SECONDS [TARGET...]      (default: every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer's instrumentation uses
# unstable compiler flags; RUSTC_BOOTSTRAP lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(front_end ir_text mutated_programs end_to_end second_order)
fi
export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    case "$t" in
        front_end) cp -n ../tests/*/*.mcir "corpus/$t/" 2>/dev/null || true ;;
        ir_text)
            # Seeds: the printed IR of every program that compiles, with its rules.
            for f in ../tests/programs/*.mcir ../tests/check/*.mcir; do
                out="corpus/$t/$(basename "$f" .mcir).ir"
                [ -e "$out" ] || cargo run -q --release --manifest-path ../Cargo.toml -p mcir_cli --bin mcc -- \
                    ir "$f" --stage all > "$out" 2>/dev/null || rm -f "$out"
            done ;;
    esac
    # Inputs that are lists of choices are worth their full length from the start.
    extra=()
    case "$t" in mutated_programs|end_to_end|second_order) extra=(-len_control=0 -max_len=512) ;; esac
    echo "== $t for ${seconds}s"
    # Inputs that once failed (fuzz/regressions/TARGET) are replayed first, as seeds.
    dirs=("corpus/$t")
    [ -d "regressions/$t" ] && dirs+=("regressions/$t")
    cargo fuzz run "$t" "${dirs[@]}" -- -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=30 "${extra[@]}" \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 2>&1 | tee "artifacts/$t.log" | grep -E '^(#[0-9]+[[:space:]]+DONE|stat::|==[0-9]+== ERROR|thread .* panicked)' || true
done
