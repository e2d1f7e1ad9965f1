#!/usr/bin/env bash
# NCCL in a TCG guest with two GPUs (issue 37): torchrun --nproc_per_node=2
# test/gpu/multigpu/nccl.py (DDP of a small deterministic model, then an
# all-reduce sweep) natively, then in `qcuda vm --host-root --gpu=0,1` (the
# GPU machine's own PyTorch, over qcuda's libcuda.so.1 and the guest's NVML),
# then compare-nccl.py: the losses' largest difference, step time and bus
# bandwidth side by side. Under TCG the figures are reported, not targets
# (every guest CPU instruction is emulated).
# In the guest NCCL sees no NVLink and no /sys path for the GPUs, so it
# would take SHM: NCCL_P2P_LEVEL=SYS makes it take P2P, as on the host.
# CUMEM=1 keeps NCCL's default cuMem path (POSIX fd handles); default 0.
# On the GPU machine, from the repository root: bash test/gpu/multigpu/run-nccl-vm.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
OUT=${OUT:-/tmp/nccl-vm-out}; mkdir -p "$OUT"
PY=${TORCH_PY:-/opt/torch/.venv/bin/python}
STEPS=${STEPS:-20}
MAX_BYTES=${MAX_BYTES:-$((1 << 26))}
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nccl_env="NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=${CUMEM:-0} NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,SHM,ENV"
run_args="--steps=$STEPS --warmup=3 --max-bytes=$MAX_BYTES"
torchrun="$PY -m torch.distributed.run --standalone --nproc_per_node=2 test/gpu/multigpu/nccl.py"
rm -f "$OUT"/*.json "$OUT"/nccl.*.log

say "native: torchrun --nproc_per_node=2 ($run_args)"
env $nccl_env NCCL_DEBUG_FILE="$OUT/nccl.native.%p.log" \
  timeout -k 10 120 $torchrun --out="$OUT/native.json" $run_args > "$OUT/native.out" 2> "$OUT/native.err"
nrc=$?; say "native exit $nrc"

# The guest runs in this directory on the host's root (read-only); /tmp is
# the guest's. Rank 0's JSON and each rank's NCCL log come back on stdout.
script="env $nccl_env NCCL_P2P_LEVEL=SYS NCCL_DEBUG_FILE=/tmp/nccl.%p.log $torchrun --out=/tmp/vm.json $run_args; rc=\$?
echo '=== json'; cat /tmp/vm.json 2>/dev/null; echo '=== end json'
for f in /tmp/nccl.*.log; do echo \"=== log \$f\"; tail -60 \"\$f\"; done
exit \$rc"
say "TCG guest: qcuda vm --host-root --gpu=0,1 -- torchrun --nproc_per_node=2"
timeout -k 10 590 node "$app/dist/backend/src/cli/qcuda.js" vm --quiet --provider=cuda --gpu=0,1 --host-root \
  --memory=16384 --cpus=8 --timeout=570 --backend-log="$OUT/backend.vm.log" -- "$script" > "$OUT/vm.all" 2> "$OUT/vm.err"
vrc=$?; say "guest exit $vrc"
sed -n '/^=== json$/,/^=== end json$/p' "$OUT/vm.all" | sed '1d;$d' > "$OUT/vm.json"
sed -n '1,/^=== json$/p' "$OUT/vm.all" | sed '$d' > "$OUT/vm.out"
echo "guest channels: $(grep -o 'via [A-Za-z0-9/_]*' "$OUT/vm.all" | sort | uniq -c | tr -s ' ' | paste -sd';')"
if [ $vrc != 0 ]; then
  echo "--- guest stderr"; tail -30 "$OUT/vm.err"
  echo "--- guest NCCL logs (tails)"; sed -n '/^=== log /,$p' "$OUT/vm.all" | tail -60
fi
[ -s "$OUT/vm.json" ] && python3 test/gpu/multigpu/compare-nccl.py "$OUT/native.json" "$OUT/vm.json" "$OUT/nccl-vm.json"
tar -C "$OUT" -cJf /tmp/nccl-vm-logs.tar.xz . 2>/dev/null && mv /tmp/nccl-vm-logs.tar.xz "$OUT/"
say "done; logs in $OUT (nccl-vm-logs.tar.xz)"
[ $nrc = 0 ] && [ $vrc = 0 ]
