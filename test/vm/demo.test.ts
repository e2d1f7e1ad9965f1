// What `make run` shows a new user (qcuda vm --demo): which provider ran the
// calls and why, each result once, and what to try next.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const QCUDA = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'qcuda.js');
for (const v of ['QEMU_BIN', 'GUEST_KERNEL', 'GUEST_INITRD'])
  if (!process.env[v] || !fs.existsSync(process.env[v]!)) throw new Error(`VM tests need ${v}; run them with 'make test'`);

test('the demo names the provider, prints each result once, and ends with the next commands', (t) => {
  const r = spawnSync(process.execPath, [QCUDA, 'vm', '--demo', '--provider=emu', '--timeout=240'], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  t.is(r.status, 0, r.stderr);
  t.regex(r.stdout, /^qcuda: the guest's CUDA calls ran on the emu provider: device memory in host RAM, no GPU/m);
  const results = r.stdout.split('\n').filter((l) => /: PASS/.test(l));
  t.true(results.length >= 10, r.stdout);
  for (const l of results) t.is(`${r.stdout}\n${r.stderr}`.split(l).length - 1, 1, `"${l}" appears once`);
  t.regex(r.stdout, /^Next, try/m);
  // As typed: qcuda where it is on PATH (make run installs it), else node and the path of qcuda.js.
  t.regex(r.stdout, /^ {2}(qcuda|node \S+qcuda\.js) vm --disk=1G,store=host /m);
  t.regex(r.stderr, /guest command exited with status 0/);
});
