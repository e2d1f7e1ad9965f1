#!/usr/bin/env bash
# Build QEMU 10.0.2 (Debian bookworm-backports source) with the qcuda patches
# in this directory: a minimal qemu-system-x86_64 with vhost-user-qcuda(-pci).
#
#   build-qemu.sh              build (or find cached) and print the binary path last
#   build-qemu.sh --print-bin  only print the path the binary has / will have
#
# The result lives OUTSIDE the clone, in $CACHE/qemu-<hash>/bin/qemu-system-x86_64,
# where <hash> = sha256 over the configure flags, the patches (names and content)
# and this script.  A build runs in $CACHE/qemu-<hash>.tmp.* and is renamed into
# place only when complete, so an interrupted build never leaves a half cache.
# The source tarball is kept in $CACHE/dl/.
set -euo pipefail

CACHE=${CACHE:-$HOME/.cache/qcuda}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

QEMU_TARBALL=qemu_10.0.2+ds.orig.tar.xz
QEMU_TARBALL_SHA256=0901da33844a331bf8b3602b9c1fbd178e60b737c8e3ade678255bd090c9b9f1
QEMU_SRCDIR=qemu-10.0.2
CONFIGURE_FLAGS=(--target-list=x86_64-softmmu --without-default-features --enable-kvm
                 --enable-vhost-user --disable-docs --disable-debug-info
                 --disable-install-blobs --python=/usr/bin/python3)

# Packages: build (compiler, meson >= 1.5 and pycotap from backports, libs) and
# run time (firmware for -L, shared libs).  From bookworm-backports: meson,
# python3-pycotap, qemu-system-data (its 10.0 firmware matches this QEMU).
APT_PKGS=(gcc libc6-dev make patch pkg-config ninja-build python3 python3-venv xz-utils bzip2
          dpkg-dev libglib2.0-dev libfdt-dev zlib1g-dev seabios ipxe-qemu)
APT_BPO_PKGS=(meson python3-pycotap qemu-system-data)

log() { printf '[qemu] %s\n' "$*" >&2; }
die() { printf '[qemu] ERROR: %s\n' "$*" >&2; exit 1; }

cache_hash() {
    {
        printf 'flags:'; printf ' %s' "${CONFIGURE_FLAGS[@]}"; printf '\n'
        local p
        for p in "$HERE"/[0-9][0-9][0-9][0-9]-*.patch; do
            [ -e "$p" ] || continue
            printf 'patch: %s\n' "$(basename "$p")"
            cat "$p"
        done
        printf 'script:\n'
        cat "$HERE/build-qemu.sh"
    } | sha256sum | cut -c1-16
}

OUTDIR=$CACHE/qemu-$(cache_hash)
QEMU_BIN=$OUTDIR/bin/qemu-system-x86_64

if [ "${1:-}" = --print-bin ]; then
    echo "$QEMU_BIN"
    exit 0
fi

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
APT="$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"

# --- packages ------------------------------------------------------------
pkg_missing() {   # print the names among "$@" that are not installed
    local p
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || echo "$p"
    done
}

# meson must be >= 1.5 (bookworm has 1.0): treat an old one as missing
meson_too_old() {
    local v
    v=$(dpkg-query -W -f='${Version}' meson 2>/dev/null) || return 0
    dpkg --compare-versions "$v" lt 1.5
}

have_bpo_source() {   # both deb and deb-src of bookworm-backports configured?
    local t
    t=$(apt-get indextargets --format '$(RELEASE) $(IDENTIFIER)' 2>/dev/null | sort -u)
    grep -qx 'bookworm-backports Packages' <<<"$t" && grep -qx 'bookworm-backports Sources' <<<"$t"
}

ensure_bpo_source() {
    have_bpo_source && return 1
    log "adding bookworm-backports (deb + deb-src) to /etc/apt/sources.list.d/qcuda-backports.sources"
    $SUDO tee /etc/apt/sources.list.d/qcuda-backports.sources >/dev/null <<'EOF'
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    return 0
}

ensure_packages() {
    local missing bpo_missing
    missing=$(pkg_missing "${APT_PKGS[@]}")
    bpo_missing=$(pkg_missing "${APT_BPO_PKGS[@]}")
    if meson_too_old && ! grep -qx meson <<<"$bpo_missing"; then
        bpo_missing="$bpo_missing meson"
    fi
    missing=$(echo $missing) bpo_missing=$(echo $bpo_missing)   # one line
    if [ -z "$missing$bpo_missing" ]; then
        log "packages: all present"
        return
    fi
    log "packages: installing $missing $bpo_missing"
    ensure_bpo_source || true
    $APT update -qq >&2
    # shellcheck disable=SC2086
    [ -z "$missing" ] || $APT install -y -qq --no-install-recommends $missing >&2
    # shellcheck disable=SC2086
    [ -z "$bpo_missing" ] ||
        $APT install -y -qq --no-install-recommends -t bookworm-backports $bpo_missing >&2
}

# --- tarball -------------------------------------------------------------
sha_ok() { echo "$QEMU_TARBALL_SHA256  $1" | sha256sum -c --status 2>/dev/null; }

ensure_tarball() {
    local tb=$CACHE/dl/$QEMU_TARBALL tmp
    if [ -f "$tb" ] && sha_ok "$tb"; then
        log "tarball: cached $tb"
        echo "$tb"; return
    fi
    mkdir -p "$CACHE/dl"
    tmp=$(mktemp -d "$CACHE/dl/tmp.XXXXXX")
    if ensure_bpo_source; then $APT update -qq >&2; fi
    log "tarball: fetching $QEMU_TARBALL (39 MB) with apt-get source"
    # apt fetches the .orig.tar.xz and then 404s on the .dsc/.debian.tar.xz
    # of this backport: ignore its exit status, check the checksum instead.
    (cd "$tmp" && chmod 755 . && apt-get source --download-only -t bookworm-backports qemu \
        >"$tmp/apt.log" 2>&1) || true
    if [ ! -f "$tmp/$QEMU_TARBALL" ]; then
        tail -5 "$tmp/apt.log" >&2 || true
        rm -rf "$tmp"
        die "apt-get source did not fetch $QEMU_TARBALL"
    fi
    sha_ok "$tmp/$QEMU_TARBALL" || { rm -rf "$tmp"; die "sha256 mismatch for $QEMU_TARBALL (want $QEMU_TARBALL_SHA256)"; }
    mv "$tmp/$QEMU_TARBALL" "$tb"
    rm -rf "$tmp"
    log "tarball: sha256 ok, kept in $tb"
    echo "$tb"
}

# --- build ---------------------------------------------------------------
ensure_packages

if [ -x "$QEMU_BIN" ]; then
    log "cached: $QEMU_BIN (nothing to do)"
    echo "$QEMU_BIN"
    exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/qemu.lock"
if ! flock -n 9; then
    log "another QEMU build holds $CACHE/qemu.lock, waiting"
    flock 9
fi
if [ -x "$QEMU_BIN" ]; then   # built by whoever held the lock
    log "cached: $QEMU_BIN"
    echo "$QEMU_BIN"
    exit 0
fi
# leftovers of interrupted builds (we hold the lock: nobody else is building)
rm -rf "$CACHE"/qemu-*.tmp.* "$CACHE"/dl/tmp.*

TARBALL=$(ensure_tarball)
WORK=$(mktemp -d "$OUTDIR.tmp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
T0=$SECONDS

log "build: unpacking into $WORK"
tar -xf "$TARBALL" -C "$WORK" --no-same-owner
SRC=$WORK/$QEMU_SRCDIR
for p in "$HERE"/[0-9][0-9][0-9][0-9]-*.patch; do
    log "build: applying $(basename "$p")"
    patch -d "$SRC" -p1 --quiet --forward <"$p" || die "patch $(basename "$p") failed"
done
# The +ds tarball lacks the edk2 blobs pc-bios/meson.build lists (never built
# here, only ninja qemu-system-x86_64 is): empty placeholders satisfy meson.
for f in aarch64-code arm-code arm-vars riscv-code riscv-vars i386-code i386-secure-code \
         i386-vars x86_64-code x86_64-secure-code loongarch64-code loongarch64-vars; do
    [ -e "$SRC/pc-bios/edk2-$f.fd.bz2" ] || : >"$SRC/pc-bios/edk2-$f.fd.bz2"
done
rm -rf "$SRC/subprojects/dtc"   # use the system libfdt

mkdir -p "$WORK/build"
log "build: configure ${CONFIGURE_FLAGS[*]}"
(cd "$WORK/build" && "$SRC/configure" "${CONFIGURE_FLAGS[@]}" >"$WORK/configure.log" 2>&1) ||
    { tail -30 "$WORK/configure.log" >&2; die "configure failed (log above)"; }
log "build: configured in $((SECONDS - T0)) s; ninja qemu-system-x86_64 ($(nproc) jobs, ~5 min on 2 cores)"
T1=$SECONDS
if ! (cd "$WORK/build" && ninja qemu-system-x86_64 2>&1 | tee "$WORK/ninja.log" |
      awk '/^\[[0-9]+\/[0-9]+\]/ { split(substr($1, 2), a, "/"); pct = int(100 * a[1] / a[2]);
             if (pct >= next_pct) { printf "[qemu] build: %3d%% %s\n", pct, $1; fflush(); next_pct = pct - pct % 10 + 10 } }' >&2) ||
   [ ! -x "$WORK/build/qemu-system-x86_64" ]; then
    grep -v '^\[' "$WORK/ninja.log" | tail -30 >&2
    die "ninja failed (log above)"
fi
log "build: compiled in $((SECONDS - T1)) s"

mkdir -p "$WORK/out/bin"
mv "$WORK/build/qemu-system-x86_64" "$WORK/out/bin/"
{
    echo "QEMU 10.0.2 ($QEMU_TARBALL sha256 $QEMU_TARBALL_SHA256)"
    echo "configure: ${CONFIGURE_FLAGS[*]}"
    for p in "$HERE"/[0-9][0-9][0-9][0-9]-*.patch; do echo "patch: $(basename "$p") $(sha256sum <"$p" | cut -c1-16)"; done
    echo "built: $(date -u +%FT%TZ) in $((SECONDS - T0)) s"
} >"$WORK/out/BUILD-INFO"
"$WORK/out/bin/qemu-system-x86_64" -device help 2>/dev/null | grep -q '"vhost-user-qcuda-pci"' ||
    die "built binary lacks vhost-user-qcuda-pci"
mv -T "$WORK/out" "$OUTDIR"    # atomic: the cache dir appears complete or not at all
log "done in $((SECONDS - T0)) s: $QEMU_BIN"
echo "$QEMU_BIN"
