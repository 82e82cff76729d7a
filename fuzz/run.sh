#!/usr/bin/env bash
# Runs the cargo-fuzz targets one after another (fuzz/README.md): `fuzz/run.sh [RUNS] [TARGET...]`.
# Each run is one libFuzzer job on one core (`-jobs=1 -workers=1`), RUNS executions (default 10 million),
# leak detection off (the engine's VMA pool is process-wide and keeps its objects by design), ASan's fake stack off
# (README.md). The corpus grows
# in fuzz/corpus/TARGET, crashes land in fuzz/artifacts/TARGET, the log is fuzz/TARGET.log.
set -uo pipefail
cd "$(dirname "$0")"
runs=${1:-10000000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(script procmap_query engine)
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== $t: $(date -u +%FT%TZ) runs=$runs" >"$t.log"
  ASAN_OPTIONS=detect_stack_use_after_return=0 cargo +nightly fuzz run "$t" -O "corpus/$t" -- -runs="$runs" -jobs=1 -workers=1 -detect_leaks=0 \
    -print_final_stats=1 >>"$t.log" 2>&1
  echo "== $t: exit $? at $(date -u +%FT%TZ)" >>"$t.log"
  [ -f fuzz-0.log ] && mv fuzz-0.log "$t.job.log"
done
