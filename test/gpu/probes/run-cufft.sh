cd "$(dirname "$0")/../../.."; . test/gpu/unpack.sh >/dev/null
[ -d .carry/guest-lib ] && cp .carry/guest-lib/* "$QCUDA_LIB_DIR/"
b=$(mktemp -d); nvcc -O1 -arch=sm_90 -o $b/cufft test/gpu/probes/cufft_probe.cu -lcufft
echo "== native"; timeout 60 $b/cufft
echo "== qcuda run"; QCUDA_DEBUG=1 timeout 180 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda -- $b/cufft > $b/q.out 2> $b/q.err; echo "exit $?"; cat $b/q.out
grep -iE "tools-module|unsupported|not supported|NOT_FOUND|refus|export table|error" $b/q.err | sort | uniq -c | sort -rn | head -30
cp $b/q.err $OUT/cufft.err
