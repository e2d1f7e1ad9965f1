#!/usr/bin/env bash
# The static analyzer (clang-tidy's clang-analyzer-* checks) over the guest
# C: the runtime library, libcuda.so.1, libnvidia-ml.so.1 and the tracer.
# A finding fails the check; a false positive is kept quiet on its line with
# NOLINT(check) and a comment saying why the analyzer cannot see it.
#
#   lint/tidy.sh GEN_DIR     GEN_DIR: libcuda's generated headers (cu_twins.h)
set -euo pipefail
cd "$(dirname "$0")/.."
gen=${1:?usage: lint/tidy.sh GEN_DIR}
if [ "${2:-}" = --one ]; then
  # insecureAPI: memcpy and friends with explicit lengths are the house style.
  exec "$TIDY" --quiet --checks='-*,clang-analyzer-*,-clang-analyzer-security.insecureAPI.*' "$3" -- \
    -std=gnu11 -D_GNU_SOURCE -pthread -Iguest-driver/include -Iguest-driver/lib -I"$gen" \
    -I"${CUDA_HOME:-/usr/local/cuda}/include" 2>/dev/null
fi
TIDY=$(command -v clang-tidy || command -v clang-tidy-14 || true)
[ -n "$TIDY" ] || { echo "lint/tidy.sh: clang-tidy is not installed" >&2; exit 1; }
export TIDY
files=(guest-driver/lib/*.c guest-driver/libcuda/*.c guest-driver/nvml/*.c guest-driver/trace/*.c)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf '%s\n' "${files[@]}" | xargs -P"$(nproc)" -n1 bash "$0" "$gen" --one >"$out" || true
if grep -qE '(warning|error):' "$out"; then
  cat "$out"
  echo "lint/tidy.sh: $(grep -cE '(warning|error):' "$out") findings" >&2
  exit 1
fi
echo "lint/tidy.sh: no findings in ${#files[@]} files"
