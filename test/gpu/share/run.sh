#!/usr/bin/env bash
# The GPU sharing benchmark (issue 36): tenants side by side, natively (one
# process each: what the driver's time-slicing gives), under qcuda run
# without shares, and under qcuda run with --gpu-share (each tenant its own
# `qcuda run`: its own backend, its own "VM"). Each tenant prints its work
# per 1 s window (tenant.cu); summarize.py turns the lot into share.json
# and share.md: per tenant its work against its solo native rate, its share
# against its weight (over the run and per window), the aggregate against
# one native process alone, and the latency tenant's p50/p99.
#
# On the GPU machine, from the repository root (after `make gpu-bundle` here):
#   bash test/gpu/share/run.sh
# Here, a smoke check on the emu provider (copies, no kernels, tiny):
#   bash test/gpu/share/run.sh --provider=emu
# Environment: SECS (seconds a run, default 10; host 3), SCENARIOS (default
# all: equal mixed weights procs noisy-idle noisy-long noisy-bw noisy-storm;
# noisy-idle is the latency tenant beside a neighbour that runs nothing, the
# quiet baseline its p99 beside each noisy one is held to), VARIANTS
# (default native qcuda share; also mps: native under MPS, each client capped
# to its weight's part; share-mps: qcuda run --gpu-share with
# --gpu-share-mps, qcuda's workers the MPS clients; host: qcuda share),
# OUT (default ./share-out).
set -uo pipefail
cd "$(dirname "$0")/../../.."
provider=cuda
for a in "$@"; do case $a in --provider=*) provider=${a#--provider=};; *) echo "run.sh: unknown argument $a" >&2; exit 2;; esac; done
[ "$provider" = host ] && provider=emu # emu's old name
OUT=${OUT:-$PWD/share-out}; mkdir -p "$OUT"
b=$(mktemp -d /tmp/qcuda-share.XXXXXX)
trap 'rm -rf "$b"' EXIT
if [ "$provider" = cuda ]; then
  [ -n "${app:-}" ] || . test/gpu/unpack.sh
  qcuda="node $app/dist/backend/src/cli/qcuda.js"
  native_lib=$(dirname "$(find /usr/local/cuda*/ /usr/lib -name 'libcudart.so.13*' 2>/dev/null | head -1)")
  SECS=${SECS:-10}; VARIANTS=${VARIANTS:-native qcuda share}
  size=${SIZE:-2048}
else
  qcuda="node dist/backend/src/cli/qcuda.js"
  SECS=${SECS:-3}; VARIANTS=${VARIANTS:-qcuda share}
  size=64
fi
SCENARIOS=${SCENARIOS:-equal mixed weights procs noisy-idle noisy-long noisy-bw noisy-storm}
nvcc -O3 -arch=sm_90 -cudart=shared -o "$b/tenant" test/gpu/share/tenant.cu || { echo "tenant: build failed" >&2; exit 1; }
# The table of shares, private to this run.
export QCUDA_GPU_SHARE_TABLE=$b/share-table

# A scenario's tenants: NAME:MODE:WEIGHT:PROCESSES each (the host smoke turns every mode into copy).
tenants() {
  if [ "$provider" = emu ]; then spec "$1" | sed -E 's/:[a-z]+:/:copy:/g'; else spec "$1"; fi
}
spec() {
  case $1 in
    equal) echo "a:sgemm:1:1 b:sgemm:1:1 c:sgemm:1:1 d:sgemm:1:1";;
    mixed) echo "a:sgemm:1:1 b:train:1:1 c:infer:1:1 d:sgemm:1:1";;
    weights) echo "a:sgemm:1:1 b:sgemm:1:1 c:sgemm:2:1 d:sgemm:4:1";;
    procs) echo "a:sgemm:1:8 b:sgemm:1:1 c:sgemm:1:1 d:sgemm:1:1";;
    noisy-idle) echo "lat:infer:1:1 noisy:idle:1:1";;
    noisy-long) echo "lat:infer:1:1 noisy:long:1:1";;
    noisy-bw) echo "lat:infer:1:1 noisy:bw:1:1";;
    noisy-storm) echo "lat:infer:1:1 noisy:storm:1:1";;
    solo-*) echo "solo:${1#solo-}:1:1";;
  esac
}

# One tenant (its processes) under a variant; output to $2.
start() { # VARIANT SPEC OUTFILE
  local v=$1 name mode w n args; IFS=: read -r name mode w n <<< "$2"
  local modeargs="--mode=$mode --size=$([ "$mode" = bw ] && echo 512 || echo "$size")"
  args="--name=$name $modeargs --seconds=$SECS"
  local cmd="$b/tenant $args"
  [ "$n" -gt 1 ] && cmd="for i in \$(seq $n); do $b/tenant $args & done; wait"
  case $v in
    native) LD_LIBRARY_PATH=$native_lib timeout $((SECS + 60)) bash -c "$cmd" > "$3" 2> "$3.err" &;;
    qcuda) timeout $((SECS + 120)) $qcuda run --provider="$provider" --cudart=qcuda -- bash -c "$cmd" > "$3" 2> "$3.err" &;;
    mps) LD_LIBRARY_PATH=$native_lib CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$(((200 * w + wsum) / (2 * wsum))) timeout $((SECS + 60)) bash -c "$cmd" > "$3" 2> "$3.err" &;;
    share) timeout $((SECS + 120)) $qcuda run --provider="$provider" --cudart=qcuda --gpu-share="$w" -- bash -c "$cmd" > "$3" 2> "$3.err" &;;
    # The backend (its own context) stays outside MPS, as under systemd; its workers join through the option.
    # Each worker takes its part from the VMs in the table when it starts: the tenants wait until all have joined.
    share-mps) env -u CUDA_MPS_PIPE_DIRECTORY timeout $((SECS + 120)) $qcuda run --provider="$provider" --cudart=qcuda --gpu-share="$w" \
      --gpu-share-mps="$CUDA_MPS_PIPE_DIRECTORY" --backend-log="$3.log" -- bash -c "sleep 3; $cmd" > "$3" 2> "$3.err" &;;
  esac
}

runs=()
scenario() { # VARIANT SCENARIO
  local v=$1 s=$2 spec pids=()
  wsum=0; for spec in $(tenants "$s"); do IFS=: read -r _ _ w _ <<< "$spec"; wsum=$((wsum + w)); done
  for spec in $(tenants "$s"); do
    start "$v" "$spec" "$b/$v.$s.${spec%%:*}.jsonl"; pids+=($!)
  done
  wait "${pids[@]}"
  runs+=("$v" "$s" "$(tenants "$s" | tr ' ' ',')")
  echo "$v $s: $(cat "$b/$v.$s".*.jsonl | grep -c '"final"') tenant processes finished" >&2
}

# Solo rates first (what each mode does alone: natively, and under qcuda run), then the scenarios.
modes=$([ "$provider" = emu ] && echo copy || echo "sgemm train infer long bw storm")
for m in $modes; do for v in $VARIANTS; do case $v in share|mps|share-mps) ;; *) scenario "$v" "solo-$m";; esac; done; done
# mps: native tenants under NVIDIA's MPS, each client capped to its weight's
# part of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): the driver's mechanism,
# measured beside qcuda's admission control.
mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=$b/mps-pipe CUDA_MPS_LOG_DIRECTORY=$b/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"; nvidia-cuda-mps-control -d
  # share-mps: a backend refuses a PIPE_DIR whose daemon has not written its pid file yet.
  for _ in $(seq 50); do [ -s "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" ] && break; sleep 0.1; done
}
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 1; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }
for s in $SCENARIOS; do for v in $VARIANTS; do
  case $v in mps|share-mps) mps_on;; esac
  scenario "$v" "$s"
  case $v in mps|share-mps) mps_off;; esac
done; done
printf '%s\n' "${runs[@]}" | paste - - - > "$b/runs.tsv"
cp "$b"/*.jsonl "$b/runs.tsv" "$OUT/" 2>/dev/null
cp "$b"/*.log "$OUT/" 2>/dev/null  # share-mps: the backends' logs, each worker's MPS part
python3 test/gpu/share/summarize.py "$b" "$OUT/share.json" "$OUT/share.md" "$provider" && cat "$OUT/share.md"
