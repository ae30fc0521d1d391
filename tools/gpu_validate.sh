#!/usr/bin/env bash
# Build, test and sanitize the CUDA backend on a GPU machine, from the repository root:
#
#   bash tools/gpu_validate.sh [tests|sanitize|all]
#
# tests:    the first-use build (timed), python -m fmha.cuda.selftest, the test suite (PYTEST_TARGETS,
#           default tests/: on an H200 it takes over 9 minutes with 8 workers; where a job is limited to
#           less, run it in parts, e.g. PYTEST_TARGETS="tests/test_cuda.py tests/test_api.py")
# sanitize: compute-sanitizer memcheck, racecheck and synccheck on tests/sanitize_subset.py
#           (FMHA_SANITIZE_ONLY=paged: the paged cases alone)
# Logs go to $OUT (default /tmp/fmha-validate); the last lines printed are a summary.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/fmha-validate}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FMHA_CACHE_DIR=${FMHA_CACHE_DIR:-/tmp/fmha-cache}
summary=()
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember the status and time
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$name: exit $rc in $((SECONDS - t0)) s; $(tail -n 1 "$OUT/$name.log")")
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$OUT/gpu.txt" 2>&1
if [ "$what" = tests ] || [ "$what" = all ]; then
  step build python -m fmha.cuda.build --arch sm_90a --force
  step selftest python -m fmha.cuda.selftest
  if python -c "import xdist" 2>/dev/null; then n=(-n 8); else n=(); fi
  # shellcheck disable=SC2086
  step pytest python -m pytest -q "${n[@]}" ${PYTEST_TARGETS:-tests/} -rs
fi
if [ "$what" = sanitize ] || [ "$what" = all ]; then
  for tool in memcheck racecheck synccheck; do
    step "$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 python tests/sanitize_subset.py
    grep -h "ERROR SUMMARY" "$OUT/$tool.log" | tail -n 1 | sed "s/^/  $tool: /"
  done
fi
echo "GPU: $(cat "$OUT/gpu.txt")"
printf '%s\n' "${summary[@]}"
