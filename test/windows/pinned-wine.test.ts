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
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir, until } from '../helpers';
import { WINE, WINESERVER, backend, runTo, stopWine, wineEnv, winPath } from './wine';

const dist = path.resolve(__dirname, '..', '..');
const ROOT = path.resolve(dist, '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const WIN = path.join(ROOT, 'build', 'windows');

/** The Linux build under qcuda run over a region of qcuda run's size (512M, the backend's default). */
function linuxRun(dir: string, program: string, cudart: boolean): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [
      QCUDA,
      'run',
      '--provider=host',
      '--transport=shm',
      ...(cudart ? ['--cudart=qcuda'] : []),
      `--backend-log=${path.join(dir, 'linux.log')}`,
      '--',
      path.join(WIN, program),
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A Windows program's output without Wine's own lines (a fresh prefix's, on its first start). */
function programLines(out: string): string {
  return out
    .replace(/\r/g, '')
    .split('\n')
    .filter((l) => !l.startsWith('wine: '))
    .join('\n');
}

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
    t.timeout(300_000);
    t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
    const exe = path.join(WIN, 'dll', `${program}.exe`);
    t.true(fs.existsSync(exe) && fs.existsSync(path.join(WIN, 'dll', dll)), `make windows-dll built ${dll} and ${program}.exe`);
    const linux = linuxRun(tmpDir(t), program, program === 'rtpinned');
    t.is(linux.status, 0, linux.stdout + linux.stderr);
    t.regex(linux.stdout, new RegExp(`^PASS: ${program}$`, 'm'));
    const env = wineEnv('pinned');
    t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
    const b = await backend(t, tmpDir(t), {}, '512M');
    const wine = await runTo(WINE!, [exe], { ...env, QCUDA_SHM: winPath(b.region) }, 240_000);
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
    t.true(await until(() => /device reset: closing 1 sessions/.test(b.log()), 10_000), b.log());
    t.true(holds(b.region, 'PAGEABLE-STAGED!'), 'the pageable copy went through the staging room');
    for (const word of ['PINNED-BYTES-OK!', 'MAPPED-BYTES-OK!', 'MANAGED-BYTESOK!']) t.false(holds(b.region, word), word);
    t.is(await b.stop(), 0, b.log());
    t.false(fs.existsSync(b.region));
    t.deepEqual(await stopWine(env), []);
  });
}
