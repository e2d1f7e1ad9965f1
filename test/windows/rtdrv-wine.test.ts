// One session per process on Windows (issue 48): cudart64_13.dll holds no
// code of its own but forwards each runtime name to nvcuda.dll, which holds
// the runtime beside the driver API, so a program that loads both claims
// the region once. rtdrv (test/windows/rtdrv.c) allocates with each API and
// uses the memory with the other, bytes compared, and frees pinned memory
// of one through the other: under Wine over a region a real qcuda-backend
// --shm serves it prints exactly what its Linux build (NVIDIA's runtime
// over qcuda's libcuda.so.1, one session too) prints under `qcuda run
// --transport=shm`, and the backend serves one attach and one session.
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
const EXE = path.join(WIN, 'dll', 'rtdrv.exe');

/** A Windows program's output without Wine's own lines (a fresh prefix's, on its first start). */
function programLines(out: string): string {
  return out
    .replace(/\r/g, '')
    .split('\n')
    .filter((l) => !l.startsWith('wine: '))
    .join('\n');
}

test.serial('under Wine, a program of both APIs gets one session through cudart64_13.dll and nvcuda.dll, as on Linux', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  t.true(fs.existsSync(EXE), 'make windows-dll built rtdrv.exe');
  const dir = tmpDir(t);
  const linux = spawnSync(
    process.execPath,
    [QCUDA, 'run', '--provider=host', '--transport=shm', `--backend-log=${path.join(dir, 'linux.log')}`, '--', path.join(WIN, 'rtdrv')],
    { encoding: 'utf8', timeout: 120_000 },
  );
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: rtdrv$/m);
  const env = wineEnv('rtdrv');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const b = await backend(t, tmpDir(t));
  const wine = await runTo(WINE!, [EXE], { ...env, QCUDA_SHM: winPath(b.region) }, 240_000);
  t.is(wine.code, 0, wine.out);
  const out = programLines(wine.out);
  t.is(out, linux.stdout);
  t.regex(out, /^cudaMalloc'd memory through cuMemcpy: 1048576 bytes equal$/m);
  t.regex(out, /^cuMemAlloc'd memory through cudaMemcpy: 1048576 bytes equal$/m);
  t.regex(out, /^cudaFreeHost\(host\) -> cudaSuccess$/m);
  t.notRegex(wine.out, /busy|DIFFER|FAIL/);
  // One claimant: one attach, one session, ended at the detach.
  t.true(await until(() => /device reset: closing 1 sessions/.test(b.log()), 10_000), b.log());
  t.is((b.log().match(/session \w+ opened/g) ?? []).length, 1, b.log());
  t.notRegex(b.log(), /attach 2/);
  t.is(await b.stop(), 0, b.log());
  t.false(fs.existsSync(b.region));
  t.deepEqual(await stopWine(env), []);
});
