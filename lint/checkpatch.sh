#!/usr/bin/env bash
# Prints the path of the kernel's checkpatch.pl, fetching it once per machine
# into $CACHE/checkpatch-<package>/. No Debian package installs checkpatch.pl
# itself (linux-kbuild and linux-headers ship other scripts only): it comes
# from the linux-source package's tarball, of which only checkpatch.pl and the
# two data files it reads beside itself are kept. The .deb is downloaded
# (apt-get download, nothing installed) and deleted afterwards.
set -euo pipefail
CACHE=${CACHE:-$HOME/.cache/qcuda}
# 6.12 is the guest kernel's series; 6.1 (bookworm's own) if it is not offered.
PACKAGES=(linux-source-6.12 linux-source-6.1)
FILES=(checkpatch.pl spelling.txt const_structs.checkpatch)

for pkg in "${PACKAGES[@]}"; do
  if [ -x "$CACHE/checkpatch-$pkg/checkpatch.pl" ]; then
    echo "$CACHE/checkpatch-$pkg/checkpatch.pl"
    exit 0
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
for pkg in "${PACKAGES[@]}"; do
  apt-get download -q "$pkg" >&2 2>/dev/null || { apt-get update -qq >&2 && apt-get download -q "$pkg" >&2; } || continue
  series=${pkg#linux-source-}
  dpkg-deb --fsys-tarfile "$pkg"_*.deb | tar -xO "./usr/src/linux-source-$series.tar.xz" \
    | tar -xJ "${FILES[@]/#/linux-source-$series/scripts/}"
  mkdir -p "$CACHE"
  rm -rf "$CACHE/checkpatch-$pkg.tmp"
  mv "linux-source-$series/scripts" "$CACHE/checkpatch-$pkg.tmp"
  mv "$CACHE/checkpatch-$pkg.tmp" "$CACHE/checkpatch-$pkg"
  echo "$CACHE/checkpatch-$pkg/checkpatch.pl"
  exit 0
done
echo "checkpatch.sh: none of ${PACKAGES[*]} could be downloaded" >&2
exit 1
