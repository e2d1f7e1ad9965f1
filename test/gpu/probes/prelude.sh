#!/usr/bin/env bash
# Sourced first by the GPU probe scripts (run-stats.sh, run-trace.sh,
# run-fp32-choice.sh, run-localmem.sh, run-ipchold.sh): from the repository
# root, a pipe's status its first failing command's, the bundle unpacked
# into $work (test/gpu/unpack.sh: $app, $QCUDA_LIB_DIR, $QCUDA_TRACE_DIR)
# and removed at exit. It sets
#   qcuda       the bundle's qcuda, as a command: "${qcuda[@]}" run ...
#   py          PyTorch's Python ($TORCH_PY, else /opt/torch's venv)
# and probe_logs NAME makes $logs, a folder whose files come back as
# $OUT/NAME.tar.xz (OUT default gpu-out/) when the script exits.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
work=$(mktemp -d /tmp/qcuda-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
. test/gpu/unpack.sh
qcuda=(node "$app/dist/backend/src/cli/qcuda.js")
py=${TORCH_PY:-/opt/torch/.venv/bin/python3}

probe_logs() {
  OUT=${OUT:-$PWD/gpu-out}
  mkdir -p "$OUT"
  logs_name=$1
  logs=$(mktemp -d "/tmp/qcuda-$logs_name.XXXXXX")
  trap 'tar -C "$logs" -cJf "$OUT/$logs_name.tar.xz" .; rm -rf "$work" "$logs"' EXIT
}
