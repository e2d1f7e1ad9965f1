// `npm run gen` (make gen): writes every generated file (the wire header,
// the request builders, docs/protocol.md, the launch record, the cudart tables) of GENERATED_FILES
// that differs from what its generator gives. With --check (make check-gen)
// it writes nothing and exits 1 naming each stale file.
import fs from 'node:fs';
import path from 'node:path';
import { GENERATED_FILES, REPO_ROOT, staleFiles } from './generated';

function check(): number {
  const stale = staleFiles();
  for (const { file, why } of stale) process.stderr.write(`${file}: ${why}\n`);
  if (stale.length) process.stderr.write('run `npm run gen` (make gen)\n');
  return stale.length ? 1 : 0;
}

function write(): number {
  let failed = 0;
  // In the list's order: a file derived from another comes after it.
  for (const [file, generate] of Object.entries(GENERATED_FILES)) {
    const at = path.join(REPO_ROOT, file);
    let text: string;
    try {
      text = generate(REPO_ROOT);
    } catch (e) {
      process.stderr.write(`${file}: not written: ${(e as Error).message}\n`);
      failed++;
      continue;
    }
    if (fs.existsSync(at) && fs.readFileSync(at, 'utf8') === text) continue;
    fs.writeFileSync(at, text);
    process.stdout.write(`wrote ${file}\n`);
  }
  return failed ? 1 : 0;
}

process.exitCode = process.argv.includes('--check') ? check() : write();
