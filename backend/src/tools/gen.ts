// Writes the files generated from declarations (`npm run gen`, after tsc):
// the wire header and the guest library's request builders, from the
// protocol's declaration, the protocol's reference (docs/protocol.md), and the
// addon's launch record layout. test/qcuda/proto.test.ts fails when a checked-in
// copy differs from what this would write.
import fs from 'node:fs';
import path from 'node:path';
import { GENERATED_FILES } from './generated';

const root = path.resolve(__dirname, '..', '..', '..', '..'); // dist/backend/src/tools -> the repository
for (const [file, text] of Object.entries(GENERATED_FILES)) {
  const at = path.join(root, file);
  const old = fs.existsSync(at) ? fs.readFileSync(at, 'utf8') : '';
  if (old === text()) continue;
  fs.writeFileSync(at, text());
  process.stdout.write(`wrote ${file}\n`);
}
