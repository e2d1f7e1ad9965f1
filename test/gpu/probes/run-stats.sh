#!/usr/bin/env bash
# What crosses to the host per workload (docs/performance.md): each of
# WORKLOADS (workloads.py names) alone under qcuda run with QCUDA_STATS=1,
# once per batch delay of DELAYS ("default" leaves QCUDA_BATCH_DELAY_US
# unset): its figure and round trips, then the library's count of round
# trips by command (qcuda_proto.h numbers). Logs in $OUT/stats.tar.xz.
. "$(dirname "$0")/prelude.sh"
probe_logs stats
for w in ${WORKLOADS:-event_query jax_matmul}; do
  for d in ${DELAYS:-default 1000000}; do
    env=(QCUDA_STATS=1); [ "$d" = default ] || env+=(QCUDA_BATCH_DELAY_US="$d")
    env "${env[@]}" timeout 300 "${qcuda[@]}" run --provider=cuda --backend-user=root -- \
      "$py" test/gpu/workloads.py "$w" > "$logs/$w.$d.json" 2> "$logs/$w.$d.err"
    echo "== $w, delay $d: $(cut -c1-300 "$logs/$w.$d.json")"
    grep 'round trips to the host' "$logs/$w.$d.err" | cut -c1-400
  done
done
