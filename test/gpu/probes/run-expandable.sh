#!/usr/bin/env bash
# cudnn_det.py with PyTorch's expandable segments (its allocator on CUDA's
# virtual memory management), natively and under qcuda run: identical losses?
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
py=/opt/torch/.venv/bin/python3
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
env -u LD_LIBRARY_PATH timeout 200 $py test/gpu/probes/cudnn_det.py > /tmp/exp.native 2>&1
timeout 300 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda -- $py test/gpu/probes/cudnn_det.py > /tmp/exp.qcuda 2> /tmp/exp.qcuda.err
echo "== native"; cat /tmp/exp.native; echo "== qcuda run"; cat /tmp/exp.qcuda; grep -v "^qcuda: [0-9]* round trips" /tmp/exp.qcuda.err | tail -3
diff /tmp/exp.native /tmp/exp.qcuda > /dev/null && echo "IDENTICAL" || echo "DIFFERENT"
