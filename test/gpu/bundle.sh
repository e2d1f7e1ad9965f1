#!/usr/bin/env bash
# Packs what a GPU machine without network or Node.js needs to run the guest
# suite on the real GPU into .carry/ (git-ignored): node, the patched QEMU
# with its libraries and firmware, the guest kernel and initramfs, the built
# backend (dist/, the addon) and the test runner's node_modules. Run by
# `make gpu-bundle`; the device tool carries .carry/ and test/gpu/run.sh
# unpacks and runs it there. Keep it under the 64 MiB the tool carries.
# LIGHT=1 (`make gpu-bundle-run`) leaves out QEMU, virtiofsd and the guest
# kernel: enough for the `qcuda run` parts (run, workloads, the tracer),
# without waiting for a QEMU build on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIGHT=${LIGHT:-}
[ -n "$LIGHT" ] || : "${QEMU_BIN:?}" "${GUEST_KERNEL:?}" "${GUEST_INITRD:?}"
out=.carry
rm -rf "$out" && mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

xz -T2 -6 -c "$(command -v node)" > "$out/node.xz"

mkdir -p "$stage/qemu/bin" "$stage/qemu/lib" "$stage/qemu/firmware" "$stage/guest"
if [ -z "$LIGHT" ]; then
# QEMU and every library it links except glibc's own (the GPU machine has a newer glibc).
cp "$QEMU_BIN" "$stage/qemu/bin/"
ldd "$QEMU_BIN" | awk '/=> \// { print $3 }' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' \
  | xargs -r cp -L -t "$stage/qemu/lib/"
for f in qboot.rom pvh.bin linuxboot.bin linuxboot_dma.bin kvmvapic.bin multiboot_dma.bin; do
  cp -L "/usr/share/qemu/$f" "$stage/qemu/firmware/"
done
cp -L /usr/share/seabios/*.bin "$stage/qemu/firmware/" 2>/dev/null || true

# virtiofsd (qcuda vm --share, --host-root), with its libraries beside QEMU's.
: "${QCUDA_VIRTIOFSD:?}"
cp "$QCUDA_VIRTIOFSD" "$stage/qemu/bin/virtiofsd"
ldd "$QCUDA_VIRTIOFSD" | awk '/=> \// { print $3 }' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' \
  | xargs -r -n1 cp -L -t "$stage/qemu/lib/"

cp "$GUEST_KERNEL" "$stage/guest/vmlinux"
cp "$GUEST_INITRD" "$stage/guest/initrd.cpio"
fi
[ -d build/guest/bin ] && cp -a build/guest/bin "$stage/guest/bin"
[ -d build/guest/lib ] && cp -a build/guest/lib "$stage/guest/lib"

# The driver-call tracer (docs/tracing.md): the shim, its wrapper script and
# the diff, together in trace/ (the GPU machine has no node to generate it).
mkdir -p "$stage/trace"
cp build/trace/libcuda.so.1 guest-driver/trace/qcuda-trace guest-driver/trace/trace-diff.py "$stage/trace/"

# The backend as built here, and the test runner (no compiler needed there).
mkdir -p "$stage/app/addon/build/Release"
cp -a dist "$stage/app/dist"
# The kernels of the cuda provider's module tests (the GPU machine has no nvcc).
mkdir -p "$stage/app/dist/test/qcuda/fixtures"
nvcc -fatbin -gencode 'arch=compute_80,code=[sm_80,compute_80]' -gencode arch=compute_90,code=sm_90 \
  -o "$stage/app/dist/test/qcuda/fixtures/kernels.fatbin" test/qcuda/fixtures/kernels.cu
cp addon/build/Release/*.node "$stage/app/addon/build/Release/"
cp package.json "$stage/app/"
tar -C . --exclude='node_modules/typescript' --exclude='node_modules/@types' -cf "$stage/app/node_modules.tar" node_modules

tar -C "$stage" -cf - qemu guest trace app | xz -T2 -6 > "$out/bundle.tar.xz"
du -sh "$out"/*
total=$(du -sk "$out" | cut -f1)
[ "$total" -lt $((60 * 1024)) ] || { echo "bundle is ${total} KiB: over the 60 MiB budget" >&2; exit 1; }
