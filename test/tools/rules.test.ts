// The checks of CONTRIBUTING.md's written rules (lint/) themselves: each
// refuses what breaks its rule and passes what keeps it, so a check that
// silently stopped checking would fail here.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');

function tmp(t: import('ava').ExecutionContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-rules-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** lint/commits.mjs --msg on one message: its exit status and what it said. */
function message(t: import('ava').ExecutionContext, text: string): { status: number | null; out: string } {
  const file = path.join(tmp(t), 'COMMIT_EDITMSG');
  fs.writeFileSync(file, text);
  const r = spawnSync(process.execPath, [path.join(ROOT, 'lint/commits.mjs'), '--msg', file], { encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const BODY = '\n\nWhy it was needed, and what was tested.\n';

test('commit messages: an area from the table, a subject of at most 72 characters, a body', (t) => {
  t.is(message(t, `backend: keep a session's quota${BODY}`).status, 0);
  t.is(message(t, `addon, backend: one change across both${BODY}# a comment git strips\n`).status, 0);
  t.is(message(t, `docs: ${'x'.repeat(66)}${BODY}`).status, 0, 'exactly 72 characters');
  t.is(message(t, 'Merge branch "x"\n').status, 0, 'a merge is not checked');
  const refused: [string, RegExp][] = [
    [`Tests: a subject without an area${BODY}`, /does not start with "area: "/],
    [`frontend: an area not in the table${BODY}`, /unknown area frontend/],
    [`docs: ${'x'.repeat(67)}${BODY}`, /subject is 73 characters, over 72/],
    ['docs: no body\n', /no body after a blank line/],
    ['docs: no blank line\nthen the body\n', /no body after a blank line/],
    [`docs: a long body line\n\n${'word '.repeat(15)}\n`, /body line 3 is \d+ characters, over 72/],
  ];
  for (const [text, why] of refused) {
    const r = message(t, text);
    t.is(r.status, 1, text);
    t.regex(r.out, why);
  }
  // Unbreakable lines (a URL) and indented ones (quoted output) may run long.
  t.is(message(t, `docs: long lines that may be\n\nSee\n${'a/'.repeat(40)}\n    ${'quoted output '.repeat(8)}\n`).status, 0);
});

test('file sizes: a hand-written source over 900 lines fails, a generated one does not', (t) => {
  const dir = tmp(t);
  fs.mkdirSync(path.join(dir, 'backend/src/tools'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'backend/src/tools/generated.ts'), "export const GENERATED_FILES = {\n  'big.h': protoHeader,\n};\n");
  const lines = (n: number) => 'x\n'.repeat(n);
  fs.writeFileSync(path.join(dir, 'big.h'), lines(2000));
  fs.writeFileSync(path.join(dir, 'ok.ts'), lines(900));
  fs.writeFileSync(path.join(dir, 'notes.md'), lines(2000));
  const run = () => spawnSync('bash', [path.join(ROOT, 'lint/file-size.sh'), dir], { encoding: 'utf8' });
  t.is(run().status, 0, run().stdout);
  fs.writeFileSync(path.join(dir, 'script'), `#!/bin/sh\n${lines(900)}`);
  fs.writeFileSync(path.join(dir, 'long.c'), lines(901));
  const r = run();
  t.is(r.status, 1);
  t.deepEqual(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split(':')[0])
      .sort(),
    ['long.c', 'script'],
  );
});
