// vhost-user-ts as a package of its own: its tsconfig.json builds the
// library alone (every module of the folder, nothing from outside it, its
// declarations included), and it carries the MIT license the repository's
// SPDX lines and packaging name. Test files are not the library's modules.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';

const root = path.resolve(__dirname, '..', '..', '..');
const lib = path.join(root, 'backend', 'src', 'vhost-user');

/** Every file under dir whose name ends with suffix, relative to dir, sorted. */
function filesUnder(dir: string, suffix: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(suffix) && !f.split(path.sep).includes('dist'))
    .sort();
}

test('its tsconfig.json builds every module of the library and nothing else', (t) => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'vhost-user-ts-'));
  try {
    const tsc = require.resolve('typescript/bin/tsc');
    // Throws, with tsc's errors, on any error: an import reaching outside the folder is one (rootDir).
    execFileSync(process.execPath, [tsc, '-p', lib, '--outDir', out], { encoding: 'utf8' });
    const modules = filesUnder(lib, '.ts').filter((f) => !f.endsWith('.d.ts'));
    t.true(modules.length > 25, `${modules.length} modules`);
    t.deepEqual(
      filesUnder(out, '.js'),
      modules.map((f) => f.replace(/\.ts$/, '.js')),
    );
    t.deepEqual(
      filesUnder(out, '.d.ts'),
      modules.map((f) => f.replace(/\.ts$/, '.d.ts')),
    );
  } finally {
    fs.rmSync(out, { recursive: true, force: true });
  }
});

/** The MIT permission text of packaging/debian/copyright, one paragraph per entry, spaces collapsed. */
function paragraphs(text: string): string[] {
  return text
    .split(/\n\s*\.?\s*\n/)
    .map((p) => p.replace(/\s+/g, ' ').trim())
    .filter((p) => p !== '');
}

test('it is MIT licensed, with the text the packaging gives', (t) => {
  t.is(JSON.parse(fs.readFileSync(path.join(lib, 'package.json'), 'utf8')).license, 'MIT');
  const copyright = fs.readFileSync(path.join(root, 'packaging', 'debian', 'copyright'), 'utf8');
  const mit = /^License: MIT\n((?: .*\n)+)/m.exec(copyright)?.[1] ?? '';
  const license = fs.readFileSync(path.join(lib, 'LICENSE'), 'utf8');
  t.true(license.startsWith('MIT License\n\nCopyright (c) 2026 qcuda maintainers\n\n'), license.slice(0, 80));
  const body = paragraphs(mit);
  t.is(body.length, 3);
  t.deepEqual(paragraphs(license).slice(2), body);
});

// Imports of this folder's tests that reach past the library, kept until
// the library offers the same: an fd channel to a child process, and the
// status socket beside the peer-uid check.
const NOT_YET_OWN: Record<string, string[]> = {
  'handover.test.ts': ['backend/src/qcuda/workers/channel'],
  'ring-owner-child.ts': ['backend/src/qcuda/workers/channel'],
  'peer.test.ts': ['backend/src/sys/status-socket'],
};

test("this folder's tests import the library, its example echo device and the shared helpers, nothing else", (t) => {
  const dir = path.join(root, 'test', 'vhost-user');
  const own = (spec: string) =>
    spec.startsWith('node:') ||
    spec === 'ava' ||
    spec === '../helpers' ||
    spec.startsWith('./') ||
    spec === '../../backend/src/devices/echo' ||
    spec === '../../backend/src/vhost-user' ||
    spec.startsWith('../../backend/src/vhost-user/');
  const beyond: Record<string, string[]> = {};
  for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.ts'))) {
    const specs = [...fs.readFileSync(path.join(dir, f), 'utf8').matchAll(/^(?:import|export)\b[^;]*?'([^']+)';/gms)].map((m) => m[1]);
    t.true(specs.length > 0, `${f}: imports read`);
    const out = specs.filter((s) => !own(s)).map((s) => s.replace(/^(\.\.\/)+/, ''));
    if (out.length) beyond[f] = out;
  }
  t.deepEqual(beyond, NOT_YET_OWN);
});
