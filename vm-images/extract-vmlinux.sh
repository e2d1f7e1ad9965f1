#!/bin/bash
# extract-vmlinux.sh BZIMAGE OUT: write the uncompressed ELF vmlinux held in
# an x86 bzImage (the payload located by the boot protocol header:
# setup_sects at 0x1f1, payload_offset/payload_length at 0x248/0x24c).
set -euo pipefail
in=$1 out=$2
rd() { od -An -t u"$2" -j "$1" -N "$2" "$in" | tr -d ' '; }
[ "$(od -An -c -j 0x202 -N 4 "$in" | tr -d ' ')" = HdrS ] || { echo "$in: not a bzImage" >&2; exit 1; }
setup=$(rd 0x1f1 1); [ "$setup" = 0 ] && setup=4
start=$(( (setup + 1) * 512 + $(rd 0x248 4) ))
len=$(rd 0x24c 4)
magic=$(od -An -t x1 -j "$start" -N 4 "$in" | tr -d ' ')
case $magic in
	28b52ffd) dec='zstd -dcq' ;;
	1f8b*) dec='gzip -dc' ;;
	fd377a58) dec='xz -dc' ;;
	02214c18) dec='lz4 -dc' ;;
	*) echo "$in: unknown payload compression (magic $magic)" >&2; exit 1 ;;
esac
# The payload ends with 4 bytes of decompressed size (size_append).
dd if="$in" iflag=skip_bytes,count_bytes skip=$start count=$((len - 4)) bs=1M status=none | $dec > "$out.tmp"
[ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] || { echo "$in: payload is not an ELF" >&2; exit 1; }
mv "$out.tmp" "$out"
