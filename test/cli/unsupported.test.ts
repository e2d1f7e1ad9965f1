// The list of runtime entry points qcuda does not serve
// (guest-driver/lib/UNSUPPORTED.md) is derived from stubs.c: it must be
// current, and every stub must have a reason.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');

test('UNSUPPORTED.md lists every stub of the runtime, each with its reason, as unsupported.mjs derives it', (t) => {
  const r = spawnSync(process.execPath, [path.join(ROOT, 'guest-driver/lib/unsupported.mjs'), '--check'], { encoding: 'utf8' });
  t.is(r.status, 0, r.stderr);
});
