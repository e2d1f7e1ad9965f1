// The commit message rules of CONTRIBUTING.md ("Commit messages") as a check,
// so they cannot drift again (review 3 §4.4: 20 of 166 subjects had an area
// from the list). The areas are read from CONTRIBUTING.md's table, so the
// document and the check are one list.
//
//   node lint/commits.mjs              every non-merge commit after the base
//                                      recorded in lint/commits-base, to HEAD
//   node lint/commits.mjs RANGE        the commits of a git range (a..b)
//   node lint/commits.mjs --msg FILE   one message (the commit-msg hook)
//
// Exits 1 naming each commit and what is wrong with it.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const MAX = 72;

/** The first column of the areas table under "## Commit messages". */
export function areas(contributing) {
  const section = contributing.split(/^## Commit messages$/m)[1]?.split(/^## /m)[0] ?? '';
  const list = [...section.matchAll(/^\| `([a-z-]+)` \|/gm)].map((m) => m[1]);
  if (list.length < 5) throw new Error('CONTRIBUTING.md: no table of areas under "## Commit messages"');
  return list;
}

/** What is wrong with one message (empty when nothing). */
export function problems(message, known) {
  const lines = message.replace(/\s+$/, '').split('\n');
  const subject = lines[0] ?? '';
  const out = [];
  const m = /^([a-z-]+(?:, [a-z-]+)*): \S/.exec(subject);
  if (!m) out.push(`subject does not start with "area: " (areas: ${known.join(', ')})`);
  else {
    const unknown = m[1].split(', ').filter((a) => !known.includes(a));
    if (unknown.length) out.push(`unknown area ${unknown.join(', ')} (areas: ${known.join(', ')})`);
  }
  if ([...subject].length > MAX) out.push(`subject is ${[...subject].length} characters, over ${MAX}`);
  if (lines.length < 3 || lines[1] !== '' || lines.slice(2).every((l) => l.trim() === '')) {
    out.push('no body after a blank line (it says why, and what was tested)');
  }
  // A line with no space (a URL, a long path) cannot be wrapped, and an
  // indented one is quoted output or code: both may run longer.
  lines.slice(2).forEach((l, i) => {
    if ([...l].length > MAX && / /.test(l.trim()) && !/^( {4}|\t)/.test(l)) {
      out.push(`body line ${i + 3} is ${[...l].length} characters, over ${MAX}`);
    }
  });
  return out;
}

/** A message as git leaves it for the commit-msg hook: comment lines and everything under the scissors line go. */
function cleaned(text) {
  const cut = text.split(/^# -+ >8 -+$/m)[0];
  return cut
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n')
    .replace(/^\s*\n/, '');
}

function git(...args) {
  return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' });
}

/** The recorded base: the first line of lint/commits-base that is not a comment. */
function recordedBase() {
  const text = fs.readFileSync(path.join(ROOT, 'lint/commits-base'), 'utf8');
  return text.split('\n').find((l) => /^[0-9a-f]{40}$/.test(l.trim()));
}

function main(argv) {
  const known = areas(fs.readFileSync(path.join(ROOT, 'CONTRIBUTING.md'), 'utf8'));
  if (argv[0] === '--msg') {
    const text = cleaned(fs.readFileSync(argv[1], 'utf8'));
    // git merge and git commit --fixup/--squash write these; merges are not
    // checked, and a fixup is squashed away before it is shared.
    if (/^(Merge |fixup! |squash! |amend! )/.test(text)) return 0;
    const found = problems(text, known);
    for (const p of found) console.error(`commit message: ${p}`);
    if (found.length) console.error('(CONTRIBUTING.md, "Commit messages"; the message is kept in .git/COMMIT_EDITMSG)');
    return found.length ? 1 : 0;
  }
  try {
    git('rev-parse', '--git-dir');
  } catch {
    console.log('lint/commits.mjs: not a git checkout, no commits to check');
    return 0;
  }
  let range = argv[0];
  if (!range) {
    const base = recordedBase();
    if (!base) throw new Error('lint/commits-base holds no commit hash');
    try {
      git('cat-file', '-e', `${base}^{commit}`);
    } catch {
      // A shallow clone cut above the base: what lies between is unknown.
      console.log(`lint/commits.mjs: the base ${base.slice(0, 12)} is not in this clone (shallow?): commits not checked`);
      return 0;
    }
    range = `${base}..HEAD`;
  }
  const log = git('log', '--no-merges', '--format=%H%x00%B%x00', range);
  const entries = log.split('\0');
  let bad = 0;
  let count = 0;
  for (let i = 0; i + 1 < entries.length; i += 2) {
    const hash = entries[i].trim();
    const found = problems(entries[i + 1], known);
    count++;
    if (found.length) {
      bad++;
      console.error(`${hash.slice(0, 12)} ${entries[i + 1].split('\n')[0]}`);
      for (const p of found) console.error(`  ${p}`);
    }
  }
  if (bad) {
    console.error(`${bad} of ${count} commits in ${range} break CONTRIBUTING.md's "Commit messages": reword them (git rebase -i).`);
    console.error('(A branch begun before the rule and merged as it is: a commit after the merge moves lint/commits-base to it.)');
  } else console.log(`lint/commits.mjs: ${count} commits in ${range} follow "Commit messages"`);
  return bad ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exit(main(process.argv.slice(2)));
