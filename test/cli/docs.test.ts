// The documentation stays usable: the README stays a short user's guide,
// every link between the docs reaches a file and a heading that exist, and
// every option the two commands' help texts declare is listed in
// docs/operations.md, so a new option cannot go undocumented there.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const dist = path.resolve(__dirname, '..', '..');
const DOCS = [
  'README.md',
  'CONTRIBUTING.md',
  ...fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

function read(file: string): string {
  return fs.readFileSync(path.join(ROOT, file), 'utf8');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

function anchors(file: string): Set<string> {
  return new Set([...read(file).matchAll(/^#+ (.*)$/gm)].map((m) => slug(m[1])));
}

/** Markdown links outside code blocks, as [file, target]. */
function links(file: string): string[] {
  const text = read(file).replace(/```[\s\S]*?```/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]).filter((t) => !/^[a-z]+:/.test(t));
}

test("the README is a user's guide of at most 250 lines", (t) => {
  const lines = read('README.md').split('\n').length - 1;
  t.true(lines <= 250, `README.md has ${lines} lines: move the detail into docs/`);
});

test('every link in the README, CONTRIBUTING.md and docs/ reaches an existing file and heading', (t) => {
  const broken: string[] = [];
  for (const file of DOCS) {
    for (const target of links(file)) {
      const [to, anchor] = target.split('#');
      const dest = to ? path.normalize(path.join(path.dirname(file), to)) : file;
      if (!fs.existsSync(path.join(ROOT, dest))) broken.push(`${file}: ${target} (no file)`);
      else if (anchor && dest.endsWith('.md') && !anchors(dest).has(anchor)) broken.push(`${file}: ${target} (no heading)`);
    }
  }
  t.true(DOCS.length >= 9);
  t.deepEqual(broken, []);
});

/** The --options a help text names. */
function options(script: string, arg: string): string[] {
  const r = spawnSync(process.execPath, [path.join(dist, 'backend/src/cli', script), arg], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${script} ${arg} exited ${r.status}: ${r.stderr}`);
  return [...new Set([...`${r.stdout}${r.stderr}`.matchAll(/--([a-z][a-z-]+)/g)].map((m) => m[1]))].filter((o) => o !== 'help');
}

test('every option of qcuda-backend --help and qcuda help is listed in docs/operations.md', (t) => {
  const ops = read('docs/operations.md');
  const all = [...options('backend.js', '--help'), ...options('qcuda.js', 'help')];
  t.true(all.length > 50, `only ${all.length} options found in the help texts`);
  const missing = all.filter((o) => !new RegExp(`--${o}(?![a-z-])`).test(ops));
  t.deepEqual(missing, [], 'options missing from docs/operations.md');
});
