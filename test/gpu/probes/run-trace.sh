#!/usr/bin/env bash
# The tracer on the GPU (docs/tracing.md): each job of trace_jobs.py natively
# over NVIDIA's libcuda.so.1 and under qcuda run (cuda provider) over
# qcuda's, each traced, then trace-diff.py on the two. JOBS picks jobs
# (default all). Traces and diffs come back in $OUT/traces.tar.xz.
. "$(dirname "$0")/prelude.sh"
probe_logs traces
T=$QCUDA_TRACE_DIR
# The largest trace of a prefix: the job's own process (not a helper it spawned).
main_trace() { ls -S "$1".* 2>/dev/null | head -1; }
for job in ${JOBS:-bf16 fp16 fp32 conv graph}; do
  timeout 300 "$T/qcuda-trace" --out="$logs/$job.native" -- "$py" test/gpu/probes/trace_jobs.py "$job" \
    > "$logs/$job.native.out" 2>&1; nrc=$?
  timeout 300 "${qcuda[@]}" run --provider=cuda -- "$T/qcuda-trace" --enter \
    --real="$QCUDA_LIB_DIR/libcuda.so.1" --out="$logs/$job.qcuda" -- "$py" test/gpu/probes/trace_jobs.py "$job" \
    > "$logs/$job.qcuda.out" 2>&1; qrc=$?
  echo "== $job: exit native $nrc, qcuda $qrc; native: $(tail -1 "$logs/$job.native.out"); qcuda: $(tail -1 "$logs/$job.qcuda.out")"
  python3 "$T/trace-diff.py" "$(main_trace "$logs/$job.native")" "$(main_trace "$logs/$job.qcuda")" > "$logs/$job.diff" 2>&1
  head -c 3000 "$logs/$job.diff"; echo
  [ $qrc = 0 ] || { echo "-- last calls under qcuda:"; tail -3 "$(main_trace "$logs/$job.qcuda")" | cut -c1-400; }
done
