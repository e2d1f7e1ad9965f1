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
