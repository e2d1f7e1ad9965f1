#!/usr/bin/env bash
# Which private export table cuBLAS's fp32/TF32 kernel choice depends on
# (docs/performance.md): fp32_choice.py natively, natively under the tracer
# with each table of REFUSE refused in turn (QCUDA_TRACE_REFUSE), and under
# qcuda run. cuBLASLt's heuristic answer (CUBLASLT_LOG_LEVEL=5) and each
# native trace's slot calls of the tables come back in $OUT/fp32-choice.tar.xz.
. "$(dirname "$0")/prelude.sh"
probe_logs fp32-choice
T=$QCUDA_TRACE_DIR
job=test/gpu/probes/fp32_choice.py
heur() { grep -m3 -o 'algo.\{0,160\}' "$1" | head -3; }
echo "native: $(CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE=$logs/native.lt "$py" $job 2>&1 | tail -1)"
heur "$logs/native.lt"
for refuse in none ${REFUSE:-69a28e9f f8cff951 a094798c 263e8860}; do
  r=$refuse; [ "$r" = none ] && r=
  echo "traced, refused [$refuse]: $(QCUDA_TRACE_REFUSE=$r CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE=$logs/t-$refuse.lt \
    timeout 300 "$T/qcuda-trace" --out="$logs/t-$refuse" -- "$py" $job 2>&1 | tail -1)"
  heur "$logs/t-$refuse.lt"
done
echo "qcuda run: $(CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE=$logs/qcuda.lt timeout 300 \
  "${qcuda[@]}" run --provider=cuda -- "$py" $job 2>&1 | tail -1)"
heur "$logs/qcuda.lt"
# The native trace's calls of each table (the largest trace: the job's own process).
t=$(ls -S "$logs"/t-none.* 2>/dev/null | head -1)
for tag in ${TABLES:-69a28e9f f8cff951 a094798c 263e8860 21318c60}; do
  echo "-- $tag: $(grep -c "^x T[0-9]* $tag" "$t") slot calls; first distinct:"
  grep "^x T[0-9]* $tag\|$tag" "$t" | sed 's/^x T[0-9]* //; s/0x[0-9a-f]\{6,\}/A/g' | awk '!seen[$0]++' | head -16 | cut -c1-300
done
