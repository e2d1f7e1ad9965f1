# QEMU 10.0.2 + the qcuda patches (vhost-user-qcuda, vhost-user-qcuda-pci).
# Included by the top-level Makefile (which defines SHELL, CACHE and BUILD).
#
#   make qemu     build qemu-system-x86_64 once per machine, cached outside the
#                 clone in $(CACHE)/qemu-<hash>/ (hash of patches, configure
#                 flags and build script); later runs are a no-op.
#
# Exported to the rest of the build:
#   QEMU_BIN             absolute path of the built qemu-system-x86_64
#   QEMU_FIRMWARE_ARGS   -L flags for the firmware (Debian's qemu-system-data,
#                        seabios and ipxe-qemu; the source build has none)

QEMU_PATCH_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
QEMU_BUILD_SCRIPT := $(QEMU_PATCH_DIR)/build-qemu.sh
QEMU_BIN := $(shell CACHE='$(CACHE)' bash '$(QEMU_BUILD_SCRIPT)' --print-bin)
QEMU_FIRMWARE_ARGS := -L /usr/share/qemu -L /usr/share/seabios -L /usr/lib/ipxe/qemu

.PHONY: qemu
# Always runs the script: it checks the packages (also the run-time firmware)
# in well under a second and returns at once when the binary is cached.
qemu:
	@CACHE='$(CACHE)' bash '$(QEMU_BUILD_SCRIPT)' >/dev/null

# No prerequisites on purpose: the path already encodes the content hash,
# and patch-file mtimes (fresh clone, checkout) must not force a rebuild.
$(QEMU_BIN):
	@CACHE='$(CACHE)' bash '$(QEMU_BUILD_SCRIPT)' >/dev/null
