#!/usr/bin/env bash
# Security review 3's N4 on the GPU (gpu-ipc-hold.cu): natively, and under
# qcuda run with a 12 GiB quota, with the most GPU memory nvidia-smi saw in
# use while each ran (natively about 16 GiB: the freed 8 GiB stays held by
# the broken opener; under qcuda at most the quota).
. "$(dirname "$0")/prelude.sh"
nvcc -arch sm_90 -O2 -o "$work/gpu-ipc-hold" test/gpu/probes/gpu-ipc-hold.cu || exit 1
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr -dc 0-9; }
peak_of() {
  "$@" &
  local pid=$! peak=0 u
  while kill -0 $pid 2>/dev/null; do u=$(used); [ "${u:-0}" -gt $peak ] && peak=$u; sleep 0.1; done
  wait $pid; echo "exit $?; GPU memory used at most ${peak} MiB (idle: $(used) MiB)"
}
echo "== native"; peak_of timeout 120 "$work/gpu-ipc-hold"
echo "== qcuda run --device-memory-limit=12G"
peak_of timeout 120 "${qcuda[@]}" run --provider=cuda --backend-user=root \
  --device-memory-limit=12G -- "$work/gpu-ipc-hold"
