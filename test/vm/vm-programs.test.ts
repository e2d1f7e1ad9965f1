// The guest CUDA programs (test/guest) in a real guest on the host
// provider: through qcuda's runtime, NVIDIA's static runtime and NVIDIA's
// shared runtime over qcuda's libcuda.so.1; a pool shared by two processes;
// what crosses to the host.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { runVm } from '../../backend/src/vm/runner';
import { base } from './helpers';

// Every guest CUDA program (test/guest/*.cu, built with nvcc -cudart=shared and
// loading qcuda's libcudart.so.13) in one guest on the emu provider, with a
// quota so the quota program meets it; each must end in PASS.
test.serial('the guest CUDA programs pass against the emu provider', async (t) => {
  const dir = path.resolve(__dirname, '..', '..', '..', 'test', 'guest');
  const programs = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.cu'))
    .map((f) => f.slice(0, -3));
  programs.push('memcpy_ptds', 'stream_ptds', 'memadvise_ptds');
  const script = programs.map((p) => `echo "=== ${p}"; ${p}; echo "=== ${p} exit $?"`).join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=emu', '--device-memory-limit=1G'], timeoutMs: 600_000 });
  const skipped: string[] = [];
  for (const p of programs) {
    const section = r.stdout.split(`=== ${p}\n`)[1]?.split(`=== ${p} exit`)[0] ?? '';
    const exit = new RegExp(`=== ${p} exit (\\d+)`).exec(r.stdout)?.[1];
    if (exit === '77') {
      // A kernel program: the emu provider must refuse its kernels with the documented error.
      t.regex(section, new RegExp(`SKIP: ${p.replace('_ptds', '')}: no kernel support on this device \\(cuda\\w+\\)`), p);
      // The checks it ran before its first kernel (memadvise runs most of its own there) must pass.
      t.notRegex(
        section,
        /^FAIL /m,
        `${p}:\n${section
          .split('\n')
          .filter((l) => /FAIL/.test(l))
          .join('\n')}`,
      );
      skipped.push(p);
      continue;
    }
    t.is(
      exit,
      '0',
      `${p}:\n${section
        .split('\n')
        .filter((l) => /FAIL/.test(l))
        .join('\n')}`,
    );
    t.regex(section, new RegExp(`PASS: ${p.replace('_ptds', '')}: \\d+ checks`), p);
  }
  if (skipped.length) t.log(`kernel programs refused by the emu provider (they run on the GPU): ${skipped.join(', ')}`);
  t.log(
    programs
      .map(
        (p) => new RegExp(`PASS: ${p.replace('_ptds', '')}: (\\d+) checks`).exec(r.stdout.split(`=== ${p}\n`)[1] ?? '')?.[0] ?? `${p}: ?`,
      )
      .join('; '),
  );
});

// The same programs built with nvcc's defaults (static cudart: NVIDIA's
// runtime inside the program, which loads libcuda.so.1, here qcuda's) must
// print exactly what their -cudart=shared builds print and exit the same way:
// NVIDIA's runtime accepts qcuda's export tables and integrity check, and
// every runtime call it makes through the driver API answers as qcuda's own
// runtime does. Kernel programs stop at their first kernel on this provider
// (the same SKIP line from both builds); the GPU run (test/gpu) runs them.
test.serial("default-built programs (static cudart over qcuda's libcuda.so.1) print what their -cudart=shared builds print", async (t) => {
  const script = [
    'cd /tmp',
    'for s in /usr/local/bin/*_static; do p=$(basename $s _static)',
    '  echo "=== $p shared"; $p 2>/dev/null; echo "=== $p shared exit $?"',
    '  echo "=== $p static"; ${p}_static 2>/dev/null; echo "=== $p static exit $?"',
    'done',
    'echo "=== drvapi"; drvapi; echo "=== drvapi exit $?"',
    // The guest's NVML by its soname, as NCCL opens it: the image's, over qcuda's libcuda.
    'echo "=== nvmlcheck"; nvmlcheck; echo "=== nvmlcheck exit $?"',
    // Device 0's memory, stream and event through the driver API (one device here: test/run runs it on two).
    'echo "=== multidevctx"; multidevctx; echo "=== multidevctx exit $?"',
  ].join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=emu', '--device-memory-limit=1G'], timeoutMs: 600_000 });
  t.is(r.exit, 0, r.stderr);
  const programs = [...r.stdout.matchAll(/^=== (\w+) static$/gm)].map((m) => m[1]);
  t.true(programs.length >= 20, `only ${programs.length} programs: ${programs.join(', ')}`);
  const passed: string[] = [];
  for (const p of programs) {
    const shared = r.stdout.split(`=== ${p} shared\n`)[1].split(`=== ${p} shared exit`)[0];
    const stat = r.stdout.split(`=== ${p} static\n`)[1].split(`=== ${p} static exit`)[0];
    t.is(stat, shared, p);
    t.is(
      new RegExp(`=== ${p} static exit (\\d+)`).exec(r.stdout)?.[1],
      new RegExp(`=== ${p} shared exit (\\d+)`).exec(r.stdout)?.[1],
      `${p}: exit status`,
    );
    if (new RegExp(`^PASS: ${p}: \\d+ checks`, 'm').test(stat)) passed.push(p);
  }
  // The programs without kernels run all their checks here: they must pass, not skip.
  for (const p of ['callbacks', 'device', 'errors', 'hostmem', 'memcpy', 'mempool', 'priorities', 'queries', 'quota', 'stream', 'threads'])
    t.true(passed.includes(p), `${p} passed`);
  // The driver-API program runs every check up to its first module here.
  const drv = r.stdout.split('=== drvapi\n')[1]?.split('=== drvapi exit')[0] ?? '';
  t.is(/=== drvapi exit (\d+)/.exec(r.stdout)?.[1], '77', drv);
  t.regex(drv, /^SKIP: drvapi: no kernel support on this device \(CUDA_ERROR_NO_BINARY_FOR_GPU\)$/m);
  t.notRegex(drv, /^FAIL /m, drv);
  t.true((drv.match(/^ok /gm) ?? []).length >= 45, drv);
  const nvml = r.stdout.split('=== nvmlcheck\n')[1]?.split('=== nvmlcheck exit')[0] ?? '';
  t.is(/=== nvmlcheck exit (\d+)/.exec(r.stdout)?.[1], '0', nvml);
  t.regex(nvml, /^ok {3}device 0: the handle of its bus id as CUDA writes it$/m);
  t.regex(nvml, /^PASS: nvmlcheck: \d+ checks$/m);
  const ctx = r.stdout.split('=== multidevctx\n')[1]?.split('=== multidevctx exit')[0] ?? '';
  t.is(/=== multidevctx exit (\d+)/.exec(r.stdout)?.[1], '0', ctx);
  t.regex(ctx, /^PASS: multidevctx: \d+ checks$/m);
  t.log(
    `${programs.length} default-built programs, identical output; passing (no kernels): ${passed.join(', ')}; drvapi: ${(drv.match(/^ok /gm) ?? []).length} checks before its first module`,
  );
});

// NVIDIA's own libcudart.so.13 (the CUDA toolkit's, first on the library
// path through /qcuda/files) runs the -cudart=shared programs over qcuda's
// libcuda.so.1 and prints what they print over qcuda's runtime library.
test.serial("NVIDIA's libcudart.so.13 over qcuda's libcuda.so.1 runs the -cudart=shared programs as qcuda's runtime does", async (t) => {
  const cudart = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'lib64', 'libcudart.so.13');
  if (!fs.existsSync(cudart)) throw new Error(`${cudart} is missing: the CUDA toolkit is part of the build machine`);
  const programs = ['device', 'memcpy', 'stream', 'priorities', 'errors', 'hostmem', 'quota', 'threads', 'callbacks'];
  const script = [
    'echo "=== loaded"; LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=/qcuda/files:/usr/local/lib /usr/local/bin/device | grep libcudart; echo "=== loaded end"',
    ...programs.map(
      (p) =>
        `echo "=== ${p} qcuda"; LD_LIBRARY_PATH=/usr/local/lib ${p} 2>/dev/null; echo "=== ${p} nvidia"; LD_LIBRARY_PATH=/qcuda/files:/usr/local/lib ${p} 2>/dev/null; echo "=== ${p} end"`,
    ),
  ].join('\n');
  const r = await runVm({
    ...base,
    files: [cudart],
    command: script,
    backendArgs: ['--provider=emu', '--device-memory-limit=1G'],
    timeoutMs: 300_000,
  });
  t.is(r.exit, 0, r.stderr);
  // The second pass really runs NVIDIA's library (of the toolkit's size), not qcuda's.
  t.regex(r.stdout.split('=== loaded\n')[1] ?? '', /libcudart\.so\.13 => \/qcuda\/files\/libcudart\.so\.13/);
  for (const p of programs) {
    const ours = r.stdout.split(`=== ${p} qcuda\n`)[1]?.split(`=== ${p} nvidia`)[0] ?? '';
    const theirs = r.stdout.split(`=== ${p} nvidia\n`)[1]?.split(`=== ${p} end`)[0] ?? '';
    t.regex(
      theirs,
      new RegExp(`^PASS: ${p}: \\d+ checks$`, 'm'),
      `${p} over NVIDIA's runtime:\n${theirs
        .split('\n')
        .filter((l) => /FAIL/.test(l))
        .join('\n')}`,
    );
    t.is(theirs, ours, p);
  }
});

// Two processes of one guest, each with its own session through the guest
// driver: a memory pool shared between them (test/libcuda/poolipc.c: its
// descriptor over a unix socket, a pointer's bytes both ways, the refusals).
test.serial('a memory pool shared between two processes of one guest: bytes both ways, refusals', async (t) => {
  const r = await runVm({ ...base, command: 'poolipc', backendArgs: ['--provider=emu'] });
  t.is(r.exit, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^ok {3}importer: reads the exporter's bytes$/m);
  t.regex(r.stdout, /^ok {3}exporter: reads the importer's bytes$/m);
  t.regex(r.stdout, /^PASS: poolipc importer: \d+ checks$/m);
  t.regex(r.stdout, /^PASS: poolipc: \d+ checks$/m);
});

// QCUDA_STATS: a process says at exit what crossed to the host (round trips:
// synchronous calls and batches of posted work), through either library.
test.serial('QCUDA_STATS counts the round trips to the host: synchronous calls, and batches of posted requests', async (t) => {
  const r = await runVm({
    ...base,
    command: 'QCUDA_STATS=1 stream >/dev/null; QCUDA_STATS=1 stream_static >/dev/null',
    backendArgs: ['--provider=emu'],
  });
  t.is(r.exit, 0, r.stderr);
  const rows = [
    ...r.stderr.matchAll(/qcuda: (\d+) round trips to the host: (\d+) calls and (\d+) batches carrying (\d+) posted requests/g),
  ].map((m) => m.slice(1).map(Number));
  t.is(rows.length, 2, r.stderr);
  for (const [trips, calls, batches, posted] of rows) {
    t.is(trips, calls + batches);
    t.true(batches > 0 && posted > batches, 'posted requests travel several to a batch');
  }
  t.is(rows[1][3], rows[0][3], "the driver API posts the same work as qcuda's runtime");
  t.true(Math.abs(rows[1][1] - rows[0][1]) <= 2, `synchronous calls: ${rows[0][1]} and ${rows[1][1]}`);
  t.log(`stream: ${rows[0][0]} round trips (${rows[0][3]} requests posted in ${rows[0][2]} batches); stream_static: ${rows[1][0]}`);
});

// A module image crosses once per VM: the first process sends it, the next
// ones (either library: the static cudart's cuLibraryLoadData and qcuda's
// runtime name the same fat binary) find it on the host by its SHA-256.
test.serial('module images cross once per VM: later processes find them on the host by content', async (t) => {
  const r = await runVm({
    ...base,
    command: 'for p in vectorAdd vectorAdd_static vectorAdd; do QCUDA_DEBUG=1 $p 2>&1 | grep "qcuda\\[debug\\]: module of"; done',
    backendArgs: ['--provider=emu'],
  });
  t.is(r.exit, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean);
  t.is(lines.length, 3, r.stdout);
  t.regex(lines[0], /module of (\d+) bytes: \1 of them for this device, sent: cudaErrorNoKernelImageForDevice/);
  for (const l of lines.slice(1)) t.regex(l, /, cached on the host: cudaErrorNoKernelImageForDevice/);
});
