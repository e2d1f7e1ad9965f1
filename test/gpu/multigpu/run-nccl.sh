#!/usr/bin/env bash
# NCCL in a 2-process torchrun (issue 37, docs/multi-gpu.md "NCCL: what it
# needs"), on a host with 2 GPUs: test/gpu/multigpu/nccl.py (DDP training
# of a small deterministic model, then an all-reduce sweep 8 B to 1 GiB)
# natively and under `qcuda run --provider=cuda --gpu=0,1`, then a table:
# the losses' largest difference, step time and bus bandwidth per size side
# by side. NCCL's INFO logs of every rank are kept in $OUT; a run that fails
# prints their tails. Then a short run under qcuda with NCCL's defaults
# (cuMem on), to see where that path stops.
# On the GPU machine, from the repository root: bash test/gpu/multigpu/run-nccl.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
OUT=${OUT:-/tmp/nccl-out}; mkdir -p "$OUT"
PY=${TORCH_PY:-/opt/torch/.venv/bin/python}
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# Both runs: no switch multicast (NVLS), INFO logs a file per rank, and
# legacy CUDA IPC for P2P (NCCL_CUMEM_ENABLE=0), the path that has run on
# GPUs; cuMem's P2P path (POSIX fds between workers, served since 6e5f588,
# CI only) is tried after, with NCCL's defaults.
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,ENV
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node=2 test/gpu/multigpu/nccl.py)
# QCUDA_RUN_ARGS: more qcuda run options (e.g. --own-queues=no).
QRUN=(node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda --gpu=0,1 ${QCUDA_RUN_ARGS:-})
tails() { # TAG: the end of each rank's NCCL log and of the run's stderr
  for f in "$OUT"/nccl.$1.*.log; do [ -f "$f" ] && { echo "--- $f"; tail -25 "$f"; }; done
  echo "--- $OUT/$1.err"; grep -v '^qcuda: ' "$OUT/$1.err" | tail -25
}
rm -f "$OUT"/nccl.*.log "$OUT"/*.json
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; head -4 "$OUT/topo.txt"

say "native: torchrun --nproc_per_node=2"
NCCL_CUMEM_ENABLE=0 NCCL_DEBUG_FILE="$OUT/nccl.native.%h.%p.log" \
  timeout -k 10 120 "${TORCHRUN[@]}" --out="$OUT/native.json" > "$OUT/native.out" 2> "$OUT/native.err"
nrc=$?; say "native exit $nrc"; [ $nrc = 0 ] || tails native

say "qcuda run --provider=cuda --gpu=0,1 -- torchrun --nproc_per_node=2"
NCCL_CUMEM_ENABLE=0 NCCL_DEBUG_FILE="$OUT/nccl.qcuda.%h.%p.log" \
  timeout -k 10 150 "${QRUN[@]}" --backend-log="$OUT/backend.qcuda.log" -- "${TORCHRUN[@]}" --out="$OUT/qcuda.json" > "$OUT/qcuda.out" 2> "$OUT/qcuda.err"
qrc=$?; say "qcuda exit $qrc"; [ $qrc = 0 ] || tails qcuda
# Which transport each run took (NCCL's "via P2P/IPC", "via SHM/direct/direct", ...).
for tag in native qcuda; do
  echo "$tag channels: $(grep -ho 'via [A-Za-z0-9/_]*' "$OUT"/nccl.$tag.*.log 2>/dev/null | sort | uniq -c | tr -s ' ' | paste -sd';')"
done

python3 test/gpu/multigpu/compare-nccl.py "$OUT/native.json" "$OUT/qcuda.json" "$OUT/nccl.json"

# CUMEM=0 skips it.
[ "${CUMEM:-1}" = 0 ] || {
say "qcuda, NCCL's defaults (cuMem on): 5 steps, all-reduce up to 4 KiB"
NCCL_DEBUG_FILE="$OUT/nccl.cumem.%h.%p.log" \
  timeout -k 10 60 "${QRUN[@]}" --backend-log="$OUT/backend.cumem.log" -- "${TORCHRUN[@]}" --out="$OUT/cumem.json" --steps=5 --warmup=1 --max-bytes=4096 > "$OUT/cumem.out" 2> "$OUT/cumem.err"
crc=$?; say "qcuda with cuMem exit $crc"; [ $crc = 0 ] && tail -3 "$OUT/cumem.out" || tails cumem
}
tar -C "$OUT" -cJf /tmp/nccl-logs.tar.xz . 2>/dev/null && mv /tmp/nccl-logs.tar.xz "$OUT/"
say "done; logs in $OUT (nccl-logs.tar.xz)"
[ $nrc = 0 ] && [ $qrc = 0 ]
