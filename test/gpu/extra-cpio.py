#!/usr/bin/env python3
"""extra-cpio.py OUT SRC:DST... writes a newc cpio archive of the files SRC
at the paths DST (relative, no leading /), for appending to the guest's
initramfs (the kernel unpacks concatenated archives). Used by test/gpu/run.sh
to put the GPU machine's own cuBLAS into a guest; no cpio binary needed."""
import sys

def header(name, mode, size, ino):
    fields = [ino, mode, 0, 0, 1, 1, size, 0, 0, 0, 0, len(name) + 1, 0]
    return b'070701' + ''.join('%08X' % f for f in fields).encode() + name.encode() + b'\0'

def pad(n):
    return b'\0' * ((4 - n % 4) % 4)

with open(sys.argv[1], 'wb') as out:
    ino = 100000
    for pair in sys.argv[2:]:
        src, dst = pair.split(':', 1)
        with open(src, 'rb') as f:
            data = f.read()
        h = header(dst, 0o100755, len(data), ino)
        out.write(h + pad(len(h)) + data + pad(len(data)))
        ino += 1
    h = header('TRAILER!!!', 0, 0, 0)
    out.write(h + pad(len(h)))
    # Padded to 512 bytes, as the image is: what the runner appends at boot
    # (the guest's files) must start aligned.
    out.write(b'\0' * ((512 - out.tell() % 512) % 512))
