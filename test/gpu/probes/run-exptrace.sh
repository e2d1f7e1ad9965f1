#!/usr/bin/env bash
# cuFFT and the driver's tools-module export table, natively (exptrace.c).
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/exptrace-out}; mkdir -p "$OUT"; b=$(mktemp -d)
gcc -shared -fPIC -O1 -I/usr/local/cuda/include -o $b/exptrace.so test/gpu/probes/exptrace.c -ldl
nvcc -O1 -arch=sm_90 -o $b/cufft test/gpu/probes/cufft_probe.cu -lcufft
echo "== plain"; timeout 60 $b/cufft
echo "== traced"; LD_PRELOAD=$b/exptrace.so timeout 60 $b/cufft 2> $OUT/trace.txt; echo "exit $?"; grep -c EXPTRACE $OUT/trace.txt
echo "== guarded"; EXPTRACE_GUARD=1 LD_PRELOAD=$b/exptrace.so timeout 60 $b/cufft 2> $OUT/guard.txt; echo "exit $?"
grep -v 'gpa ' $OUT/trace.txt | head -150
echo ======; grep -v 'gpa ' $OUT/guard.txt | head -150
