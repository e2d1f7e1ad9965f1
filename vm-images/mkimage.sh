#!/bin/bash
# mkimage.sh OUTDIR: build OUTDIR/vmlinux (from /boot/vmlinuz-$GUEST_KVER)
# and OUTDIR/initrd.cpio (base initramfs). Called by `make vm-image` with
# GUEST_KVER, QCUDA_KO, GUEST_BIN (guest programs) and GUEST_LIB (optional
# extra guest libraries) in the environment. Outputs are replaced only when
# their content changes.
set -euo pipefail
out=$1
here=$(dirname "$(readlink -f "$0")")
: "${GUEST_KVER:?}" "${QCUDA_KO:?}" "${GUEST_BIN:?}"
GUEST_LIB=${GUEST_LIB:-}
# Uncompressed boots fastest under TCG (README.md, "Boot time").
INITRD_COMPRESS=${INITRD_COMPRESS:-none}
mkdir -p "$out"

# 1. Kernel: the unpacked ELF vmlinux, booted through its PVH entry point.
vmlinuz=/boot/vmlinuz-$GUEST_KVER
if [ ! -s "$out/vmlinux" ] || [ "$vmlinuz" -nt "$out/vmlinux" ]; then
	echo "  VMLINUX $out/vmlinux (from $vmlinuz)"
	"$here/extract-vmlinux.sh" "$vmlinuz" "$out/vmlinux"
fi

# 2. Initramfs staging tree.
root=$out/rootfs
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/lib,usr/local/bin,usr/local/lib,proc,sys,dev,tmp,root,etc,qcuda/files}
# Mirror the host's merged-/usr layout so that library paths printed by ldd
# and the loader path in ELF headers (/lib64/...) resolve in the guest too.
for d in lib lib64; do
	if [ -L /$d ]; then ln -s "$(readlink /$d)" "$root/$d"; else mkdir -p "$root/$d"; fi
done

cp /bin/busybox "$root/bin/busybox"
# (No early-exiting reader in a pipeline: with pipefail its writer's SIGPIPE fails the script.)
if grep -q '=>' <<<"$(ldd /bin/busybox 2>/dev/null || true)"; then
	echo "error: /bin/busybox is not static (install busybox-static)" >&2; exit 1
fi
for a in $("$root/bin/busybox" --list-full); do
	[ -e "$root/$a" ] || [ -L "$root/$a" ] || ln -s /bin/busybox "$root/$a"
done
install -m 755 "$here/init" "$root/init"
install -m 755 "$here/qcuda-chroot" "$root/usr/bin/qcuda-chroot"
mkdir -p "$root/lib/modules"
strip --strip-debug -o "$root/lib/modules/qcuda.ko" "$QCUDA_KO"
# virtio_blk (a module in the cloud kernel): for GPU disks (qcuda vm --disk).
blk=/lib/modules/$GUEST_KVER/kernel/drivers/block/virtio_blk.ko.xz
if [ -f "$blk" ]; then xz -dc "$blk" > "$root/lib/modules/virtio_blk.ko"; fi
# overlay (a module too): for qcuda vm --host-root-writable (qcuda-chroot -w).
ovl=/lib/modules/$GUEST_KVER/kernel/fs/overlayfs/overlay.ko.xz
if [ -f "$ovl" ]; then xz -dc "$ovl" > "$root/lib/modules/overlay.ko"; fi
echo "root:x:0:0:root:/root:/bin/sh" > "$root/etc/passwd"
echo "root:x:0:" > "$root/etc/group"
# The kernel opens /dev/console for /init before devtmpfs is mounted.
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null ||
	echo "warning: cannot mknod dev/console (not root?): /init starts without a console until it mounts devtmpfs" >&2

# Guest programs and extra libraries.
elfs=()
if [ -d "$GUEST_BIN" ]; then
	cp -a "$GUEST_BIN/." "$root/usr/local/bin/"
	while IFS= read -r f; do elfs+=("$f"); done < <(find "$GUEST_BIN" -type f -perm -u+x)
fi
if [ -n "$GUEST_LIB" ] && [ -d "$GUEST_LIB" ]; then
	cp -a "$GUEST_LIB/." "$root/usr/local/lib/"
	while IFS= read -r f; do elfs+=("$f"); done < <(find "$GUEST_LIB" -type f -name '*.so*')
fi

# Shared libraries: what the programs need (ldd) plus what a program built
# with `nvcc -cudart=shared` needs, with their own dependencies and the loader.
libpath() { /sbin/ldconfig -p | awk -v n="$1" '$1 == n && /x86-64/ && !found { print $NF; found = 1 }'; }
wanted=()
for n in libstdc++.so.6 libgcc_s.so.1 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libc.so.6; do
	p=$(libpath "$n")
	[ -n "$p" ] || { echo "error: $n not found on the host" >&2; exit 1; }
	wanted+=("$p")
done
# OpenMP's runtime (gcc -fopenmp programs: `qcuda vm --file=./omp_prog`),
# gcc's own, as the build host's gcc links it. Other host libraries come
# with --host-root (the host's whole root filesystem).
gomp=$(gcc -print-file-name=libgomp.so.1)
[ -e "$gomp" ] || { echo "error: libgomp.so.1 not found (gcc -print-file-name=libgomp.so.1 says '$gomp'; apt install libgomp1)" >&2; exit 1; }
wanted+=("$gomp")
declare -A seen=()
add_lib() { # copy $1 (as named by ldd) to the same canonical directory in the image
	local p=$1 dir
	[ -n "${seen[$p]:-}" ] && return
	seen[$p]=1
	case $(readlink -f "$p") in /usr/local/cuda*|/usr/lib/x86_64-linux-gnu/libcuda*)
		# The guest's libcudart is the project's own (GUEST_LIB or
		# /qcuda/files/lib), never NVIDIA's.
		echo "note: not copying NVIDIA library $p into the image" >&2; return ;;
	esac
	dir=$(readlink -f "$(dirname "$p")")
	mkdir -p "$root$dir"
	cp -L "$p" "$root$dir/$(basename "$p")"
}
for f in "${wanted[@]}"; do add_lib "$f"; done
for f in "${wanted[@]}" "${elfs[@]}"; do
	while read -r line; do
		case $line in
		*'=> not found'*)
			echo "warning: $(basename "$f") needs ${line%% *}, not found on the host (expected from GUEST_LIB or /qcuda/files/lib)" >&2 ;;
		*'=> /'*) p=${line#*=> }; add_lib "${p%% (*}" ;;
		/*) add_lib "${line%% (*}" ;;
		esac
	done < <(LD_LIBRARY_PATH=${GUEST_LIB} ldd "$f" 2>/dev/null || true)
done

# 3. Archive: deterministic (fixed mtimes, sorted, owner root), then
# replaced only if it changed.
find "$root" -exec touch -h -d @1 {} +
tmp=$out/initrd.tmp
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort |
	cpio -o -H newc -R 0:0 --reproducible --quiet) > "$tmp"
case $INITRD_COMPRESS in
	none) ;;
	gzip) gzip -n -9 < "$tmp" > "$tmp.z" && mv "$tmp.z" "$tmp" ;;
	zstd) zstd -q -19 --stdout "$tmp" > "$tmp.z" && mv "$tmp.z" "$tmp" ;;
	lz4) lz4 -q -l -9 -c "$tmp" > "$tmp.z" && mv "$tmp.z" "$tmp" ;;
	xz) xz --check=crc32 -9 -c "$tmp" > "$tmp.z" && mv "$tmp.z" "$tmp" ;;
	*) echo "unknown INITRD_COMPRESS=$INITRD_COMPRESS" >&2; exit 1 ;;
esac
# Pad to 512 bytes so that an archive appended at boot starts aligned.
truncate -s %512 "$tmp"
if cmp -s "$tmp" "$out/initrd.cpio"; then
	rm -f "$tmp"
else
	mv "$tmp" "$out/initrd.cpio"
	echo "  INITRD $out/initrd.cpio ($(stat -c %s "$out/initrd.cpio") bytes, compression $INITRD_COMPRESS)"
fi
