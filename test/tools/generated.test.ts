// Every committed generated file (backend/src/tools/generated.ts) is what its
// generator gives for the tree as it is: the one staleness check of the
// repository (make check-gen runs the same).
import test from 'ava';
import { REPO_ROOT, staleFiles } from '../../backend/src/tools/generated';

test('every generated file is current (npm run gen writes them)', (t) => {
  const stale = staleFiles(REPO_ROOT);
  t.deepEqual(stale, [], stale.map((s) => `${s.file}: ${s.why}`).join('\n'));
});
