// Windows' first pieces of issue 48, under Wine 8, against a real
// qcuda-backend --shm: the shared-memory region's attach
// (guest-driver/lib/shm_attach.c over guest-driver/windows/os_win32.c,
// cross-built with mingw-w64: `make windows`) and requests over its rings
// (the library's vhu_ring.c). Each Windows program prints what the Linux
// build of the same program prints; the backend serves each attach and ends
// it at its detach; the Linux library then takes the region and runs a CUDA
// program over it.
// Wine's prefix is cached under ~/.cache/qcuda (its first start takes
// seconds to minutes); WINEDEBUG=-all.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { backend, programLines, ROOT, runTo, WIN, wineFor, wineRun, winPath } from './wine';

const BIN = path.join(ROOT, 'build', 'guest', 'bin');

test.serial('under Wine, the Windows build attaches to a region the Linux backend serves, as the Linux build does', async (t) => {
  const env = wineFor(t);
  t.true(fs.existsSync(path.join(WIN, 'shm_probe.exe')), 'make windows built the probe');
  const b = await backend(t, tmpDir(t));
  const linux = await runTo(path.join(WIN, 'shm_probe'), [b.region, '200'], process.env, 60_000);
  t.is(linux.code, 0, linux.out);
  // Wine sees the host's files under Z:.
  const wine = await wineRun(env, path.join(WIN, 'shm_probe.exe'), [winPath(b.region), '200']);
  t.is(wine.code, 0, wine.out);
  const lines = (s: string) => s.split(/\r?\n/).filter((l) => /^(attached|alive):/.test(l));
  t.deepEqual(lines(wine.out), lines(linux.out));
  t.regex(linux.out, /^generation 1$/m);
  t.regex(wine.out, /^generation 2\r?$/m);
  t.regex(wine.out, /^attached: protocol \d+, \d+ queues, 2 rings, data 126 MiB at 0x40000000\r?$/m);
  t.regex(wine.out, /^alive: 1\r?$/m);
  // The backend served both attaches and ended each at its detach.
  t.true(await b.logged(/frontend disconnected/, 2), b.log());
  t.regex(b.log(), /attach 2 served/);
  // The Linux library takes the region after the Windows process let go, and runs a program over it.
  const prog = await runTo(
    path.join(BIN, 'device'),
    [],
    { ...process.env, QCUDA_SHM: b.region, LD_LIBRARY_PATH: path.join(ROOT, 'build', 'guest', 'lib') },
    60_000,
  );
  t.is(prog.code, 0, prog.out);
  t.regex(prog.out, /^PASS: device/m);
  t.regex(b.log(), /attach 3 served/);
});

test.serial(
  "under Wine, requests through the library's transport over the region: HELLO, 8 MiB both ways, errors, as on Linux",
  async (t) => {
    const env = wineFor(t);
    const b = await backend(t, tmpDir(t));
    const linux = await runTo(path.join(WIN, 'shm_calls'), [], { ...process.env, QCUDA_SHM: b.region }, 60_000);
    t.is(linux.code, 0, linux.out);
    const wine = await wineRun(env, path.join(WIN, 'shm_calls.exe'), [], b.region);
    t.is(wine.code, 0, wine.out);
    t.is(programLines(wine.out), linux.out);
    t.regex(wine.out, /^ {5}transport shm\r?$/m);
    t.regex(wine.out, /^ok {3}MEMCPY_DTOH: the same bytes back\r?$/m);
    t.regex(wine.out, /^PASS: shm_calls\r?$/m);
    // Each build's session opened, and ended with its attach (the library detaches at exit).
    t.is((b.log().match(/session \w+ opened/g) ?? []).length, 2, b.log());
    t.true(await b.logged(/device reset: closing 1 sessions/, 2), b.log());
  },
);

test.serial('under Wine, a region cut short or foreign is refused as on Linux, and a missing one is not found', async (t) => {
  const env = wineFor(t);
  const dir = tmpDir(t);
  fs.writeFileSync(path.join(dir, 'short'), Buffer.alloc(100));
  fs.writeFileSync(path.join(dir, 'foreign'), Buffer.alloc(8192, 0x5a));
  for (const [name, want] of [
    ['short', 'EPROTO'],
    ['foreign', 'EPROTO'],
    ['missing', 'ENOENT'],
  ]) {
    const f = path.join(dir, name);
    const linux = await runTo(path.join(WIN, 'shm_probe'), [f], process.env, 60_000);
    const wine = await wineRun(env, path.join(WIN, 'shm_probe.exe'), [winPath(f)]);
    t.is(linux.code, 1, name);
    t.is(wine.code, 1, name);
    t.regex(wine.out, new RegExp(`^attach failed: ${want}`, 'm'), name);
    t.is(programLines(wine.out), linux.out, name);
  }
});
