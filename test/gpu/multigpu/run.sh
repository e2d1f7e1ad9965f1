#!/usr/bin/env bash
# Several GPUs in one guest process (issue 37), on a host with 2 GPUs:
# cudaMemcpyPeer bandwidth both ways (256 MiB, bytes checked) natively and
# under `qcuda run --gpu=0,1`, side by side; then test/guest/multidevice.cu
# (both builds) and test/libcuda/ipcpair and poolipc under qcuda run --gpu=0,1;
# NVML (test/libcuda/nvmlcheck) from NVIDIA's library and from qcuda's guest one.
# On the GPU machine, from the repository root: bash test/gpu/multigpu/run.sh
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
OUT=${OUT:-/tmp/multigpu-out}; mkdir -p "$OUT"
b=$(mktemp -d)
qrun() { timeout 300 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda --gpu=0,1 -- "$@"; }
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; cat "$OUT/topo.txt"
nvcc -O2 -arch=sm_90 -o $b/peer test/gpu/multigpu/peer_bandwidth.cu 2> $b/peer.build || { echo "peer_bandwidth: build failed"; cat $b/peer.build; exit 1; }
timeout 120 $b/peer > $b/native.out 2>&1; echo "native exit $?" >> $b/native.out
qrun $b/peer > $b/qcuda.out 2> "$OUT/peer.qcuda.err"; echo "qcuda exit $?" >> $b/qcuda.out
cp $b/native.out $b/qcuda.out "$OUT/"
echo "===== cudaMemcpyPeer, 256 MiB x 10"
printf '%-10s %-22s %-22s\n' direction native 'qcuda run --gpu=0,1'
for d in '0->1' '1->0'; do
  n=$(grep "^peer $d " $b/native.out | cut -d' ' -f3-); q=$(grep "^peer $d " $b/qcuda.out | cut -d' ' -f3-)
  printf '%-10s %-22s %-22s\n' "$d" "${n:-none}" "${q:-none}"
done
grep -h -E "^devices|exit" $b/native.out $b/qcuda.out; tail -5 "$OUT/peer.qcuda.err"
echo "===== multidevice under qcuda run --gpu=0,1"
# The build's guest programs (bundle.sh copies build/guest/bin): qcuda's
# runtime (--cudart=qcuda) and nvcc's static runtime over qcuda's libcuda.
for prog in multidevice multidevice_static; do
  bin=$work/guest/bin/$prog; [ -x "$bin" ] || { echo "$prog: not in the bundle"; continue; }
  cudart=; [ $prog = multidevice ] && cudart=--cudart=qcuda
  echo "--- $prog"
  timeout 300 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda --gpu=0,1 $cudart -- "$bin" > $b/$prog.out 2> "$OUT/$prog.qcuda.err"
  echo "exit $?"; grep -E "^FAIL|^PASS" $b/$prog.out; cp $b/$prog.out "$OUT/"
done
echo "===== IPC between two processes under qcuda run (test/libcuda/ipcpair: memory and event handles; poolipc: a shared memory pool)"
# Default queues (a worker per process, own queues) and --own-queues=no (the backend serves the queues).
for prog in ipcpair poolipc; do
  for q in "" --own-queues=no; do
    bin=$work/guest/bin/$prog; [ -x "$bin" ] || { echo "$prog: not in the bundle"; break; }
    timeout 120 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda --gpu=0,1 $q -- "$bin" > $b/$prog$q.out 2> "$OUT/$prog$q.err"
    echo "$prog ${q:-(own queues)}: exit $?"; grep -E "FAIL|PASS" $b/$prog$q.out | tail -4; cp $b/$prog$q.out "$OUT/"
  done
done
echo "===== NVML: NVIDIA's, and qcuda's guest libnvidia-ml.so.1 over NVIDIA's libcuda (test/libcuda/nvmlcheck)"
# The same checks against the same GPUs: both pass and print the same.
if [ -x $work/guest/bin/nvmlcheck ]; then
  LD_LIBRARY_PATH= timeout 60 $work/guest/bin/nvmlcheck > $b/nvml.native.out 2>&1; echo "NVIDIA's NVML: exit $?"
  LD_LIBRARY_PATH= timeout 60 $work/guest/bin/nvmlcheck $work/guest/lib/libnvidia-ml.so.1 > $b/nvml.qcuda.out 2>&1; echo "qcuda's NVML: exit $?"
  grep -h -E "^FAIL|^PASS" $b/nvml.native.out $b/nvml.qcuda.out; diff $b/nvml.native.out $b/nvml.qcuda.out && echo identical
  cp $b/nvml.native.out $b/nvml.qcuda.out "$OUT/"
else echo "nvmlcheck: not in the bundle"; fi
echo "--- multidevice, nvcc static, native"
nvcc -O1 -arch=sm_90 -I test/guest -o $b/md test/guest/multidevice.cu 2> $b/md.build || cat $b/md.build
timeout 60 $b/md > $b/md.native.out 2>&1; grep -E "^FAIL|^PASS" $b/md.native.out; cp $b/md.native.out "$OUT/multidevice.native.out"
echo "--- multidevice: native against qcuda run (nvcc static build)"; diff $b/md.native.out $b/multidevice_static.out && echo identical
tar -C "$OUT" -cJf "$OUT/../multigpu.tar.xz" . 2>/dev/null; mv "$OUT/../multigpu.tar.xz" "$OUT/"
