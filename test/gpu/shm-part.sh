# Sourced by test/gpu/run.sh for PARTS=shm (not in the default list): the
# shared-memory transport (issue 48) on the GPU. The guest programs under
# `qcuda run --transport=shm` diffed against native, as the run part does
# over the socket; then copy bandwidth and call latency (copy_bench) and
# launches (launch_bench) natively, over the socket (`qcuda run`), over the
# region (`qcuda run --transport=shm`) and in a VM over virtio, ROUNDS
# rounds taken alternately (the VM once: a boot costs minutes under TCG).
# Uses run.sh's say, picked, qrun, guest_vm, $work, $LOGS, $native_lib.
say "== shm: guest programs natively and under qcuda run --transport=shm (cuda provider) =="
for prog in "$work"/guest/bin/*; do
  name=$(basename "$prog")
  picked "$name" || continue
  # As the run part, and forkquota: a program's second CUDA process finds the region taken.
  case $name in hostile|memlock|mapreset|nop_test|call_test|blkbench|copy_bench|launch_bench|stuck|ringfill|killcopy|forkquota|ipcpair|poolipc|gpa_dump|fault*|*.cubin) continue;; esac
  [ -x "$prog" ] && [ -f "$prog" ] || continue
  LD_LIBRARY_PATH=$native_lib timeout 120 "$prog" > "$LOGS/$name.shm.native.out" 2> "$LOGS/$name.shm.native.err"; nrc=$?
  qrun --transport=shm --cudart=qcuda -- timeout 120 "$prog" > "$LOGS/$name.shm.qcuda.out" 2> "$LOGS/$name.shm.qcuda.raw"; qrc=$?
  grep -v '^qcuda: ' "$LOGS/$name.shm.qcuda.raw" > "$LOGS/$name.shm.qcuda.err"
  d=""
  diff -q "$LOGS/$name.shm.native.out" "$LOGS/$name.shm.qcuda.out" >/dev/null || d="$d stdout"
  diff -q "$LOGS/$name.shm.native.err" "$LOGS/$name.shm.qcuda.err" >/dev/null || d="$d stderr"
  if [ "$nrc" = "$qrc" ] && [ -z "$d" ]; then say "$name: identical over the region (exit $nrc)"; else say "$name: DIFFERS over the region (exit native $nrc, qcuda $qrc;$d)"; status=1; fi
done

say "== shm: copy_bench and launch_bench: native, qcuda run over the socket, over the region; ${ROUNDS:=3} rounds =="
for r in $(seq "$ROUNDS"); do
  for b in copy_bench 'launch_bench 2000'; do
    tag=${b%% *}.$r
    LD_LIBRARY_PATH=$native_lib timeout 120 "$work"/guest/bin/$b > "$LOGS/shm.$tag.native.json" 2>&1
    qrun --cudart=qcuda -- timeout 120 "$work"/guest/bin/$b > "$LOGS/shm.$tag.socket.json" 2> "$LOGS/shm.$tag.socket.err"
    qrun --cudart=qcuda --transport=shm -- timeout 120 "$work"/guest/bin/$b > "$LOGS/shm.$tag.shm.json" 2> "$LOGS/shm.$tag.shm.err"
    say "round $r ${b%% *} native: $(cat "$LOGS/shm.$tag.native.json")"
    say "round $r ${b%% *} socket: $(cat "$LOGS/shm.$tag.socket.json")"
    say "round $r ${b%% *} region: $(cat "$LOGS/shm.$tag.shm.json")"
  done
done
guest_vm --memory=1536 --timeout=300 -- 'copy_bench; launch_bench 2000' > "$LOGS/shm.virtio.json" 2> "$LOGS/shm.virtio.err"
say "virtio (a VM, once): $(tr '\n' ' ' < "$LOGS/shm.virtio.json")"
