#!/usr/bin/env bash
# Security review 3's N3 on the GPU: the local memory a launch makes the
# driver reserve, natively (each launch takes its share of the GPU) and under
# qcuda run with an 8 GiB quota (the launches past it are refused, at the
# synchronize after them: launches are posted), with nvidia-smi's used
# memory while each runs.
. "$(dirname "$0")/prelude.sh"
nvcc -arch sm_90 -O2 -o "$work/gpu-localmem" test/gpu/probes/gpu-localmem.cu || exit 1
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader; }
echo "== native"; "$work/gpu-localmem"
echo "== qcuda run --device-memory-limit=8G"
"${qcuda[@]}" run --provider=cuda --device-memory-limit=8G -- "$work/gpu-localmem" &
pid=$!; peak=0
while kill -0 $pid 2>/dev/null; do u=$(used | tr -dc 0-9); [ "${u:-0}" -gt $peak ] && peak=$u; sleep 0.2; done
wait $pid; echo "exit $?; GPU memory used at most ${peak} MiB during the run"
