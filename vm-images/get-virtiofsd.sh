#!/usr/bin/env bash
# get-virtiofsd.sh OUT: put bookworm's C virtiofsd (QEMU 7.2, from the
# qemu-system-common package) at OUT, for `qcuda vm --share`.
#
# Debian 12 has no virtiofsd package (bookworm-backports neither); bookworm's
# qemu-system-common ships it as /usr/lib/qemu/virtiofsd. The .deb is fetched
# with `apt-get download` (nothing is installed, so it never mixes with the
# backports QEMU 10 packages) and only the binary is extracted, once per
# package version, into $CACHE/virtiofsd-<version>/virtiofsd. OUT is replaced
# only when its content changes. The shared libraries it needs are installed
# with apt when missing, and so are unshare/mount/findmnt (the runner makes
# read-only shares with them).
set -euo pipefail

CACHE=${CACHE:-$HOME/.cache/qcuda}
PKG=qemu-system-common
RELEASE=bookworm
# ldd of 7.2's virtiofsd: libseccomp, libcap-ng, glib (+ pcre2), libnuma.
RUNTIME_PKGS=(libseccomp2 libcap-ng0 libglib2.0-0 libnuma1 util-linux mount)

log() { printf '[virtiofsd] %s\n' "$*" >&2; }
die() { printf '[virtiofsd] ERROR: %s\n' "$*" >&2; exit 1; }

out=${1:?usage: get-virtiofsd.sh OUT}
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
APT="$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"

missing=()
for p in "${RUNTIME_PKGS[@]}"; do
	dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
updated=
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	$APT update -qq
	updated=1
	$APT install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Up to date: OUT is newer than apt's package lists and this script.
if [ -x "$out" ] && [ "$out" -nt /var/lib/apt/lists ] && [ "$out" -nt "$0" ] && "$out" --version >/dev/null 2>&1; then
	exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/virtiofsd.lock"
flock 9

# The version apt would download now: the file name in --print-uris
# ('URL' qemu-system-common_1%3a7.2+dfsg-7+deb12u18+b3_amd64.deb SIZE SHA256:...).
version() {
	local uri file v
	uri=$(apt-get -qq --print-uris download "$PKG/$RELEASE" 2>/dev/null | head -n1) || true
	[ -n "$uri" ] || return 0
	file=$(awk '{ print $2 }' <<<"$uri")
	v=${file#"${PKG}_"}
	v=${v%_*.deb}
	v=${v//%3a/:}
	printf '%s\n' "${v//%3A/:}"
}
key() { printf '%s' "$1" | tr ':~' '_-'; }

# Fetch version $1 into the cache; fails when apt cannot download it.
fetch() {
	local ver=$1 dir tmp deb
	dir=$CACHE/virtiofsd-$(key "$ver")
	[ -x "$dir/virtiofsd" ] && return 0
	log "fetching $PKG $ver ($RELEASE) for its virtiofsd"
	tmp=$(mktemp -d "$CACHE/virtiofsd.tmp.XXXXXX")
	# apt checks the download against the signed package lists.
	if ! (cd "$tmp" && apt-get -qq $([ "$(id -u)" -eq 0 ] && echo -o APT::Sandbox::User=root) \
		download "$PKG=$ver" >/dev/null); then
		rm -rf "$tmp"
		return 1
	fi
	deb=$(ls "$tmp"/*.deb)
	mkdir "$tmp/x" "$tmp/out"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" ./usr/lib/qemu/virtiofsd
	mv "$tmp/x/usr/lib/qemu/virtiofsd" "$tmp/out/virtiofsd"
	if ! "$tmp/out/virtiofsd" --version >/dev/null; then
		local why
		why=$(ldd "$tmp/out/virtiofsd" 2>&1 | grep 'not found' || true)
		rm -rf "$tmp"
		die "the virtiofsd of $PKG $ver does not run${why:+: $why}"
	fi
	rm -rf "$dir"
	mv "$tmp/out" "$dir"
	rm -rf "$tmp"
}

ver=$(version)
if [ -n "$ver" ] && ! fetch "$ver" && [ -z "$updated" ]; then
	ver= # stale package lists (the mirror dropped that version): update once
fi
if [ -z "$ver" ] && [ -z "$updated" ]; then
	# (A fresh machine has no package lists yet.)
	$APT update -qq || true
	ver=$(version)
	[ -n "$ver" ] && { fetch "$ver" || ver=; }
fi
if [ -n "$ver" ]; then
	dir=$CACHE/virtiofsd-$(key "$ver")
else
	# Offline, or apt cannot find it: the newest cached one, if any.
	dir=$(ls -d "$CACHE"/virtiofsd-*/ 2>/dev/null | grep -v '\.tmp\.' | sort -V | tail -n1 || true)
	dir=${dir%/}
	[ -n "$dir" ] && [ -x "$dir/virtiofsd" ] || die "apt cannot get $PKG from $RELEASE (network? apt sources?) and nothing is cached in $CACHE"
	log "apt cannot get $PKG/$RELEASE now; using the cached $dir"
fi

if ! cmp -s "$dir/virtiofsd" "$out"; then
	mkdir -p "$(dirname "$out")"
	install -m 755 "$dir/virtiofsd" "$out.tmp"
	mv "$out.tmp" "$out"
	log "$out: $("$out" --version | head -n1)"
fi
touch "$out"
"$out" --version >/dev/null || die "$out does not run"
