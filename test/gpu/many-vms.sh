#!/usr/bin/env bash
# N `qcuda vm` started at once on this machine (issue 34: 50 on a 64-core GPU
# machine), each on the cuda provider (GPU i mod the GPU count) running
# vectorAdd; prints how many exited 0 and the slowest wall time.
cd "$(dirname "$0")/../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
N=${N:-50}
gpus=$(nvidia-smi -L | wc -l)
dir=$(mktemp -d)
t0=$(date +%s)
for i in $(seq 1 "$N"); do
  ( s=$(date +%s%N)
    node "$app/dist/backend/src/cli/qcuda.js" vm --quiet --provider=cuda --gpu=$((i % gpus)) --memory=512 --cpus=1 --timeout=600 -- vectorAdd > "$dir/$i.out" 2> "$dir/$i.err"
    echo "$? $(( ($(date +%s%N) - s) / 1000000 ))" > "$dir/$i.rc" ) &
done
wait
ok=$(cat "$dir"/*.rc | awk '$1 == 0' | wc -l)
slowest=$(cat "$dir"/*.rc | awk '{ print $2 }' | sort -n | tail -1)
echo "$N qcuda vm at once on $(nproc) CPUs and $gpus GPUs: $ok exited 0; slowest ${slowest} ms; all done in $(( $(date +%s) - t0 )) s"
for f in "$dir"/*.rc; do read -r rc ms < "$f"; [ "$rc" = 0 ] || { echo "vm $(basename "$f" .rc): exit $rc"; tail -3 "${f%.rc}.err"; }; done | head -40
grep -l "PASS\|Test PASSED" "$dir"/*.out | wc -l | sed 's/^/vectorAdd passed in: /'
