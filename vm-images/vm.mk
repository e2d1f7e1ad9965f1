# Guest VM image: kernel (unpacked vmlinux of the bookworm-backports cloud
# kernel, booted PVH) and base initramfs (busybox, qcuda.ko, guest programs,
# their libraries, /init). See vm-images/README.md.

VM_IMAGES_DIR := $(CURDIR)/vm-images
VM_BUILD := $(BUILD)/vm
GUEST_KERNEL := $(VM_BUILD)/vmlinux
GUEST_INITRD := $(VM_BUILD)/initrd.cpio
export GUEST_KERNEL GUEST_INITRD

# Newest installed cloud kernel with headers (recursive: evaluated after
# guest-kernel-deps ran). Override with GUEST_KVER=... to pin one.
GUEST_KVER ?= $(shell cd /usr/src 2>/dev/null && ls -d linux-headers-6.*-cloud-amd64 2>/dev/null \
	| sed 's/^linux-headers-//' | while read v; do [ -e /boot/vmlinuz-$$v ] && echo $$v; done \
	| sort -V | tail -n1)

# Packages: the 6.12 cloud kernel + headers from bookworm-backports
# (tiny-initramfs in the same command, so that initramfs-tools does not
# upgrade udev/systemd on the host), busybox-static, cpio, zstd (the vmlinuz
# payload is zstd), gcc/make/libc6-dev for the module and guest programs,
# sparse for the module's check (guest-driver/guest.mk).
GUEST_APT_PKGS := busybox-static cpio zstd gcc make libc6-dev sparse
GUEST_BPO_PKGS := linux-image-cloud-amd64/bookworm-backports \
	linux-headers-cloud-amd64/bookworm-backports tiny-initramfs

.PHONY: guest-kernel-deps vm-image

guest-kernel-deps:
	@if ls /boot/vmlinuz-6.*-cloud-amd64 >/dev/null 2>&1 && ls -d /usr/src/linux-headers-6.*-cloud-amd64 >/dev/null 2>&1 \
	    && [ "$$(dpkg-query -W -f='$${Status}\n' $(GUEST_APT_PKGS) 2>/dev/null | grep -c 'install ok installed')" = $(words $(GUEST_APT_PKGS)) ]; then \
	  exit 0; fi; \
	set -e; \
	if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then \
	  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	    > /etc/apt/sources.list.d/bookworm-backports.sources; fi; \
	apt-get update -qq; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(GUEST_APT_PKGS) $(GUEST_BPO_PKGS)

vm-image: guest-kernel-deps guest-module guest-programs
	GUEST_KVER='$(GUEST_KVER)' QCUDA_KO='$(QCUDA_KO)' GUEST_BIN='$(GUEST_BIN)' \
	  GUEST_LIB='$(BUILD)/guest/lib' \
	  $(VM_IMAGES_DIR)/mkimage.sh '$(VM_BUILD)'

include $(VM_IMAGES_DIR)/virtiofsd.mk
