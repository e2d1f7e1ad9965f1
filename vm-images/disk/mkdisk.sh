#!/bin/bash
# Builds the qcuda disk image: Debian 12 from packages only (mmdebstrap from
# deb.debian.org), the bookworm-backports 6.12 cloud kernel (the test guest's),
# systemd, the qcuda packages installed with apt as a user installs them
# (DKMS builds qcuda.ko for the image's kernel), a user account in group
# qcuda, a serial console login, and qcuda-vm-run.service (the guest side of
# `qcuda vm --disk-image`).
#
#   mkdisk.sh OUT_IMG DEB...
#
# The result is a partitionless raw ext4 image (label qcuda-root), made with
# mke2fs -d from the mmdebstrap directory: no loop mounts. It is cached in
# $CACHE/guest-disk-<key>/ (key: this script, the guest files beside it and the
# .debs' content) and copied (reflink where the filesystem can) to OUT_IMG
# only when OUT_IMG is not that image already.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${CACHE:-$HOME/.cache/qcuda}
OUT=$1; shift
DEBS=("$@")
[ ${#DEBS[@]} -gt 0 ] || { echo "mkdisk.sh: no .debs given" >&2; exit 2; }

SIZE=4G          # sparse: about 1.1 GB of it is used
USER_NAME=guest  # password: guest (docs/operations.md: change it)
MIRROR=http://deb.debian.org/debian
SECURITY=http://deb.debian.org/debian-security
# What the image holds besides minbase: systemd as init, the kernel and its
# headers (DKMS builds against them), a compiler for DKMS, cpio for the run
# archive, sudo for the user. initramfs-tools: virtio_blk is a module.
PKGS=(systemd-sysv udev dbus libpam-systemd kmod procps sudo less cpio e2fsprogs
      initramfs-tools dkms gcc make libc6-dev
      linux-image-cloud-amd64/bookworm-backports linux-headers-cloud-amd64/bookworm-backports)

log() { echo "[guest-disk] $*" >&2; }

key() {
	{ sha256sum "$0" "$HERE"/customize.sh "$HERE"/qcuda-vm-run "$HERE"/qcuda-vm-run.service | cut -d' ' -f1
	  # The packages' content, not their file times.
	  for d in "${DEBS[@]}"; do dpkg-deb -f "$d" Package Version; dpkg-deb --fsys-tarfile "$d" | sha256sum; done
	} | sha256sum | cut -c1-16
}

# mmdebstrap builds; mke2fs makes the image; debugfs (e2fsprogs too) is what
# qcuda vm --disk-image reads the image with.
install_tools() {
	command -v mmdebstrap >/dev/null && command -v mke2fs >/dev/null && command -v debugfs >/dev/null && return
	log "installing mmdebstrap and e2fsprogs (apt)"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap e2fsprogs >/dev/null
}

build() {   # $1: the cache directory to fill
	local dir=$1 root=$1/root apt=$CACHE/guest-disk-apt
	mkdir -p "$apt" "$root"
	cp "${DEBS[@]}" "$dir/"
	local hooks=(
		# Downloaded packages are kept across builds (a rebuild for new .debs
		# downloads nothing).
		--setup-hook="mkdir -p \"\$1\"/var/cache/apt/archives"
		--setup-hook="sync-in '$apt' /var/cache/apt/archives"
		# Before the kernel is installed: an initramfs with only the modules
		# root needs (ext4 and virtio-pci are built in), which boots faster
		# under TCG; mkinitramfs cannot guess them in a chroot.
		--essential-hook="mkdir -p \"\$1\"/etc/initramfs-tools/conf.d \"\$1\"/usr/share/initramfs-tools/modules.d"
		--essential-hook="echo MODULES=list > \"\$1\"/etc/initramfs-tools/conf.d/qcuda-disk"
		--essential-hook="printf 'virtio_blk\nvirtio_scsi\nsd_mod\n' > \"\$1\"/usr/share/initramfs-tools/modules.d/qcuda-disk"
		--customize-hook="sync-out /var/cache/apt/archives '$apt'"
		# The qcuda packages, as a user installs them (docs/operations.md): DKMS builds
		# qcuda.ko for the image's kernel in qcuda-dkms's postinst.
		--customize-hook="mkdir -p \"\$1\"/tmp/qcuda-debs && cp $dir/*.deb \"\$1\"/tmp/qcuda-debs/"
		--customize-hook="chroot \"\$1\" sh -c 'cd /tmp/qcuda-debs && DEBIAN_FRONTEND=noninteractive apt-get install -y ./*.deb && rm -rf /tmp/qcuda-debs'"
		--customize-hook="$HERE/customize.sh \"\$1\" $USER_NAME '$HERE'"
	)
	log "mmdebstrap bookworm (+ backports kernel) into $root"
	mmdebstrap --mode=root --variant=minbase --format=directory --components=main \
		--include="$(IFS=,; echo "${PKGS[*]}")" "${hooks[@]}" \
		bookworm "$root" \
		"deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
		"deb $SECURITY bookworm-security main" "deb $MIRROR bookworm-backports main"
	log "mke2fs -d ($SIZE, sparse)"
	mke2fs -q -t ext4 -L qcuda-root -d "$root" "$dir/disk.img.tmp" "$SIZE"
	rm -rf "$root" "$dir"/*.deb
	mv "$dir/disk.img.tmp" "$dir/disk.img"
}

main() {
	local k dir
	install_tools
	[ "$(id -u)" = 0 ] || { echo "mkdisk.sh: needs root (mmdebstrap --mode=root into a directory)" >&2; exit 1; }
	k=$(key)
	dir=$CACHE/guest-disk-$k
	if [ -f "$dir/disk.img" ]; then
		log "cached: $dir/disk.img"
	else
		local t0=$SECONDS tmp
		mkdir -p "$CACHE"
		tmp=$(mktemp -d "$CACHE/guest-disk-$k.tmp.XXXXXX")
		# A failed build leaves nothing half-made in the cache.
		trap 'rm -rf "$tmp"' EXIT
		build "$tmp"
		mv "$tmp" "$dir"
		trap - EXIT
		log "built in $((SECONDS - t0)) s: $dir/disk.img"
	fi
	if [ "$(cat "$OUT.key" 2>/dev/null)" != "$k" ] || ! [ -f "$OUT" ]; then
		mkdir -p "$(dirname "$OUT")"
		rm -f "$OUT" "$OUT.key"
		cp --reflink=auto --sparse=always "$dir/disk.img" "$OUT"
		echo "$k" > "$OUT.key"
	fi
	log "$OUT ($(du -h --apparent-size "$OUT" | cut -f1), $(du -h "$OUT" | cut -f1) used)"
}

main
