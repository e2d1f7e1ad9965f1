#!/usr/bin/env bash
# cudnn_det.py natively and under qcuda run: the first differing line, if any.
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
py=/opt/torch/.venv/bin/python3
export CUBLAS_WORKSPACE_CONFIG=:4096:8
env -u LD_LIBRARY_PATH timeout 200 $py test/gpu/probes/cudnn_det.py > /tmp/det.native 2>&1
QCUDA_STATS=1 timeout 300 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda -- $py test/gpu/probes/cudnn_det.py > /tmp/det.qcuda 2> /tmp/det.qcuda.err
echo "== native"; cat /tmp/det.native; echo "== qcuda run"; cat /tmp/det.qcuda; tail -3 /tmp/det.qcuda.err
diff /tmp/det.native /tmp/det.qcuda > /dev/null && echo "IDENTICAL" || echo "DIFFERENT"
