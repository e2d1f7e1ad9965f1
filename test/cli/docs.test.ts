// The documentation stays usable: the README stays a short user's guide,
// every link between the docs reaches a file and a heading that exist, every
// file and `make` target the docs name in code exists, and every option the
// two commands' help texts declare is listed in docs/operations.md, so a new
// option cannot go undocumented there.
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

/** The text of each `code span` and each line of a fenced block. */
function codeSpans(file: string): string[] {
  const text = read(file);
  const blocks = [...text.matchAll(/```[^\n]*\n([\s\S]*?)```/g)].flatMap((m) => m[1].split('\n'));
  return [...text.replace(/```[\s\S]*?```/g, '').matchAll(/`([^`\n]+)`/g)].map((m) => m[1]).concat(blocks);
}

/** Every file of the tree, relative to it (what is built or installed left out). */
function treeFiles(dir = ''): string[] {
  const skip = new Set(['.git', 'node_modules', 'dist', 'build', '.carry']);
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (e.isDirectory()) return skip.has(e.name) || rel === 'addon/build' ? [] : treeFiles(rel);
    return [rel];
  });
}

// Files the docs name that are not in the tree, on purpose: CUDA's and
// NCCL's own sources, what the build writes, the review notes beside the repo.
const ELSEWHERE = new Set([
  'cuda.h',
  'driver_types.h',
  'cudaProfiler.h',
  'forwards.c',
  'nvcuda.def',
  'build/qcuda-paths.json',
  'nccl.json',
  'src/misc/cudawrap.cc',
  'src/include/alloc.h',
  'src/misc/shmutils.cc',
  'shared/notes/security-review-2.md',
  'shared/notes/security-review-3.md',
]);

test('every file and folder the docs name in code exists in the tree', (t) => {
  const files = treeFiles();
  const tops = new Set(files.filter((f) => f.includes('/')).map((f) => f.split('/')[0]));
  const missing: string[] = [];
  let named = 0;
  for (const file of DOCS) {
    for (const span of codeSpans(file)) {
      const name = span.trim();
      // The system's headers (`sys/mman.h`, `linux/virtio_ids.h`) are not the tree's.
      if (ELSEWHERE.has(name) || /^(sys|linux|asm|bits)\/[\w.]+\.h$/.test(name)) continue;
      // A path from the root (a folder of the tree, then more): it exists.
      if (/^[\w.-]+\/[\w./-]*$/.test(name) && tops.has(name.split('/')[0])) {
        named++;
        if (!fs.existsSync(path.join(ROOT, name))) missing.push(`${file}: ${name}`);
        // A source file by its name or the tail of its path (`providers/cuda/cuda.ts`): some file ends so.
      } else if (/^[\w./-]+\.(ts|mjs|js|c|h|cc|cu|sh|py|mk|md|json|def|txt|gyp)$/.test(name)) {
        named++;
        if (!files.some((f) => f === name || f.endsWith(`/${name}`))) missing.push(`${file}: ${name}`);
      }
    }
  }
  t.true(named > 200, `only ${named} file names found in the docs`);
  t.deepEqual(missing, [], 'files named in the docs that are not in the tree (or add them to ELSEWHERE, saying why)');
});

/** The targets the make files define (a rule's left side, before a single or double colon). */
function makeTargets(): Set<string> {
  const makefiles = ['Makefile', ...treeFiles().filter((f) => f.endsWith('.mk'))];
  const rules = makefiles.flatMap((f) => [...read(f).matchAll(/^([\w.$() -]+?)\s*::?(?!=)/gm)].map((m) => m[1]));
  return new Set(rules.flatMap((r) => r.split(/\s+/)));
}

test('every make target the docs name in code is defined', (t) => {
  const targets = makeTargets();
  const missing: string[] = [];
  let named = 0;
  for (const file of DOCS) {
    for (const span of codeSpans(file)) {
      const m = /^\s*make ((?:[a-z][\w-]*\s*)+)/.exec(span);
      for (const target of m ? m[1].split(/\s+/).filter(Boolean) : []) {
        named++;
        if (!targets.has(target)) missing.push(`${file}: make ${target}`);
      }
    }
  }
  t.true(named > 40, `only ${named} make targets found in the docs`);
  t.deepEqual(missing, []);
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

/** The folders the layout table of docs/architecture.md names in its first column (`a/`, `b/` or `a/`, `x/`: x beside a). */
function layoutFolders(): string[] {
  const rows = read('docs/architecture.md')
    .split('\n## Layout')[1]
    .split('\n## ')[0]
    .split('\n')
    .filter((l) => l.startsWith('| `'));
  return rows.flatMap((row) => {
    const spans = [...row.split(' | ')[0].matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    const first = spans[0].replace(/\/$/, '');
    // The spans after the first are its siblings (`backend/src/devices/`, `vm/`).
    return [first, ...spans.slice(1).map((s) => path.posix.join(path.posix.dirname(first), s.replace(/\/$/, '')))];
  });
}

test("the architecture's layout table names every folder of the backend's source and qcuda/, and only folders that exist", (t) => {
  const named = new Set(layoutFolders());
  t.true(named.size > 15, [...named].join(', '));
  for (const f of named) t.true(fs.existsSync(path.join(ROOT, f)), `${f} is named in the layout table but is not in the tree`);
  for (const dir of ['backend/src', 'backend/src/qcuda']) {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      if (e.isDirectory()) t.true(named.has(`${dir}/${e.name}`), `${dir}/${e.name}/ is not in the layout table of docs/architecture.md`);
    }
  }
});
