// Pinned host memory on Windows (issue 48): nvcuda.dll and cudart64_13.dll
// carve it from the region's pinned area after the request slots, as the
// Linux libraries do over the same region. drvpinned and rtpinned
// (test/windows), each built for Windows against its DLL and for Linux
// against its library, allocate pinned, mapped and managed memory, copy
// host -> device -> host through it with the bytes compared, read mapped
// memory through its device pointer, free it, fill the pinned area to its
// bound (out of memory) and get it all again: under Wine over a region a
// real qcuda-backend --shm serves, each prints exactly what its Linux build
// prints under `qcuda run --transport=shm` (the same region size). The
// region holds the bytes of the pageable copy in its staging room and none
// of the pinned copies' (they were not staged, and the fill zeroed them
// where they lay). The backend and Wine are stopped, and seen stopped.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { backend, linuxRun, programLines, stopBoth, WIN, wineFor, wineRun } from './wine';

/** Whether the file holds 64 bytes of word repeated (read in pieces: the region is 512 MiB). */
function holds(file: string, word: string): boolean {
  const needle = Buffer.from(word.repeat(64 / word.length));
  const fd = fs.openSync(file, 'r');
  const buf = Buffer.alloc(16 << 20);
  try {
    for (let pos = 0; ; pos += buf.length - needle.length) {
      const n = fs.readSync(fd, buf, 0, buf.length, pos);
      if (buf.subarray(0, n).includes(needle)) return true;
      if (n < buf.length) return false;
    }
  } finally {
    fs.closeSync(fd);
  }
}

for (const [program, dll, oom] of [
  ['drvpinned', 'nvcuda.dll', 'CUDA_ERROR_OUT_OF_MEMORY'],
  ['rtpinned', 'cudart64_13.dll', 'cudaErrorMemoryAllocation'],
] as const) {
  test.serial(`under Wine, ${program} pins memory through ${dll} as its Linux build does through the region`, async (t) => {
    const env = wineFor(t, 'pinned');
    const exe = path.join(WIN, 'dll', `${program}.exe`);
    t.true(fs.existsSync(exe) && fs.existsSync(path.join(WIN, 'dll', dll)), `make windows-dll built ${dll} and ${program}.exe`);
    // Over a region of qcuda run's size (512M, the backend's default), as the backend's below.
    const linux = linuxRun(tmpDir(t), [path.join(WIN, program)], program === 'rtpinned' ? ['--cudart=qcuda'] : []);
    t.is(linux.status, 0, linux.stdout + linux.stderr);
    t.regex(linux.stdout, new RegExp(`^PASS: ${program}$`, 'm'));
    const b = await backend(t, tmpDir(t), {}, '512M');
    const wine = await wineRun(env, exe, [], b.region);
    t.is(wine.code, 0, wine.out);
    const out = programLines(wine.out);
    t.is(out, linux.stdout);
    // What came back: the bytes each way, the bound, and the room had again after the frees.
    t.is((out.match(/: 4194304 bytes equal$/gm) ?? []).length, 3, out);
    const bound = new RegExp(`of 8 MiB pieces: (\\d+), then ${oom}$`, 'm').exec(out);
    t.truthy(bound, out);
    t.true(Number(bound![1]) > 40, out); // about 446 MiB of 512 are the pinned area
    t.regex(out, new RegExp(`^after freeing them all: ${bound![1]} again$`, 'm'));
    t.notRegex(out, /NOT_SUPPORTED|NotSupported|DIFFER|FAIL/);
    // The session ended at the detach; then the region shows what was staged: the pageable
    // copy's bytes, and none of the pinned copies' (copied where they lay, zeroed by the fill).
    t.true(await b.logged(/device reset: closing 1 sessions/), b.log());
    t.true(holds(b.region, 'PAGEABLE-STAGED!'), 'the pageable copy went through the staging room');
    for (const word of ['PINNED-BYTES-OK!', 'MAPPED-BYTES-OK!', 'MANAGED-BYTESOK!']) t.false(holds(b.region, word), word);
    await stopBoth(t, b, env);
  });
}
