// The command table (commands/index.ts) is folded from the command files,
// each of which exports its runs as RUNS: every command a session sends
// has a run, nothing else has one, and a command with a run in two files
// is refused at the build, naming both (a spread would let the later run
// replace the earlier unseen).
import test from 'ava';
import { COMMANDS, foldRuns } from '../../backend/src/qcuda/commands';
import { CALLS, type CallDecl } from '../../backend/src/qcuda/wire/protocol';

test('every command a session sends has a run, and no other name has one', (t) => {
  const sent = Object.entries(CALLS as Record<string, CallDecl>)
    .filter(([, d]) => d.side !== 'device')
    .map(([n]) => n)
    .sort();
  t.deepEqual(Object.keys(COMMANDS).sort(), sent);
  for (const [name, run] of Object.entries(COMMANDS)) t.is(typeof run, 'function', name);
});

test('a command with a run in two files is refused, naming both files', (t) => {
  const run = () => undefined;
  const e = t.throws(() => foldRuns({ memory: { RUNS: { MEMSET: run } }, array: { RUNS: { MEMSET_2D: run, MEMSET: run } } }));
  t.is(e?.message, 'command MEMSET has a run in memory.ts and in array.ts');
  t.deepEqual(Object.keys(foldRuns({ memory: { RUNS: { MEMSET: run } }, array: { RUNS: { MEMSET_2D: run } } })), ['MEMSET', 'MEMSET_2D']);
});
