#!/usr/bin/env bash
# Runs one GradBench eval against one tool, one core, and writes its log:
#   run.sh EVAL TOOL LOG [EVAL ARGS..]
# EVAL: lse, llsq, gmm, ode, lstm, hello; TOOL: mcc, manual or tapenade.
# Needs a GradBench checkout (GRADBENCH, default ../gradbench beside this project) with
# its CLI built, the C++ tools' sources and a Python with numpy, scipy and pydantic
# (PYTHON); see README.md here. MCC is the mcc binary (default: this project's release
# build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
eval_name="$1"; tool="$2"; log="$(realpath -m "$3")"; shift 3
gb="${GRADBENCH:-$root/../gradbench}"
python="${PYTHON:-python3}"
mcc="$(realpath "${MCC:-$root/target/release/mcc}")"
core="${CORE:-1}"
case "$tool" in
  mcc) tool_cmd="taskset -c $core $mcc gradbench --dir $root/benches/gradbench" ;;
  manual) tool_cmd="taskset -c $core $python python/gradbench/gradbench/cpp.py manual" ;;
  tapenade) tool_cmd="taskset -c $core $python python/gradbench/gradbench/tools/tapenade/run.py" ;;
  *) echo "unknown tool $tool" >&2; exit 2 ;;
esac
cd "$gb"
export PYTHONPATH="$gb/python/gradbench"
"$gb/target/release/gradbench" run -o "$log" \
  --eval "$python python/gradbench/gradbench/evals/$eval_name/run.py $*" \
  --tool "$tool_cmd" > /dev/null
