#!/usr/bin/env bash
# Issue 34's probes natively and under qcuda run (QCUDA_DEBUG=1), side by
# side: what each prints, and qcuda's debug lines about what it refused.
# On the GPU machine, from the repository root: bash test/gpu/probes/run-probes.sh
cd "$(dirname "$0")/../../.."
[ -n "${app:-}" ] || . test/gpu/unpack.sh
OUT=${OUT:-/tmp/probes-out}; mkdir -p "$OUT"
b=$(mktemp -d)
for p in cufft vmm link graphmem; do
  extra=; [ $p = cufft ] && extra=-lcufft
  nvcc -O1 -arch=sm_90 -o $b/$p test/gpu/probes/${p}_probe.cu -lcuda $extra 2> $b/$p.build || { echo "$p: build failed"; cat $b/$p.build; continue; }
  echo "===== $p native"; timeout 60 $b/$p 2>&1 | tail -12
  echo "===== $p qcuda run"
  QCUDA_DEBUG=1 timeout 120 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda -- $b/$p > $b/$p.q.out 2> $b/$p.q.err; echo "exit $?"
  tail -12 $b/$p.q.out; grep -iE "unsupported|not supported|NOT_FOUND|no such|refus|export table|error" $b/$p.q.err | sort | uniq -c | sort -rn | head -25
  cp $b/$p.q.err "$OUT/$p.qcuda.err"
done
if [ -n "${JAX:-}" ]; then
  py=/opt/torch/.venv/bin/python3
  code='import time,jax,jax.numpy as jnp; t=time.time(); x=jnp.ones((1024,1024)); f=jax.jit(lambda a: a@a); print(float(f(x).sum())); g=jax.grad(lambda a: (a*a).sum()); print(float(g(x).sum())); print("jax ok", round(time.time()-t,2))'
  echo "===== jax native"; timeout 120 $py -c "$code" 2>&1 | tail -4
  echo "===== jax qcuda run"; QCUDA_DEBUG=1 timeout 240 node "$app/dist/backend/src/cli/qcuda.js" run --provider=cuda -- $py -c "$code" > $b/jax.out 2> $b/jax.err; echo "exit $?"; tail -4 $b/jax.out
  grep -iE "unsupported|not supported|NOT_FOUND|no such|error" $b/jax.err | sort | uniq -c | sort -rn | head -25; tail -5 $b/jax.err; cp $b/jax.err "$OUT/jax.qcuda.err"
fi
tar -C "$OUT" -cJf "$OUT/../probes.tar.xz" . 2>/dev/null; mv "$OUT/../probes.tar.xz" "$OUT/"
