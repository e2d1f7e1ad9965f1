#!/usr/bin/env bash
# Sourced by test/gpu/run.sh (and by hand when debugging on the GPU machine):
# unpacks .carry/ into $work and sets the environment the runs need.
work=${work:-$(mktemp -d /tmp/qcuda-gpu.XXXXXX)}
xz -dc .carry/node.xz > "$work/node" && chmod +x "$work/node"
xz -dc .carry/bundle.tar.xz | tar -C "$work" -xf -
tar -C "$work/app" -xf "$work/app/node_modules.tar"
export PATH=$work:$PATH
export LD_LIBRARY_PATH=$work/qemu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export QEMU_BIN=$work/qemu/bin/qemu-system-x86_64 GUEST_KERNEL=$work/guest/vmlinux GUEST_INITRD=$work/guest/initrd.cpio
export QCUDA_FIRMWARE_DIRS=$work/qemu/firmware
export QCUDA_VIRTIOFSD=$work/qemu/bin/virtiofsd
export QCUDA_GPU_TESTS=1
# qcuda run's libraries (the build's build/guest/lib).
export QCUDA_LIB_DIR=$work/guest/lib
# The driver-call tracer: $work/trace/qcuda-trace (the shim beside it) and
# $work/trace/trace-diff.py (docs/tracing.md).
export QCUDA_TRACE_DIR=$work/trace
app=$work/app
