// The shared-memory region's header as the backend reads and writes it
// (backend/src/shm/layout.ts) against the C header the guest library is
// built from (guest-driver/include/qcuda_shm.h), as the C compiler lays it
// out; and the layout the backend writes as the library checks it.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DATA_GPA, DATA_OFFSET, HDR_BYTES, Header, Off, RING_SIZE, SHM_MAGIC, SHM_VERSION } from '../../backend/src/shm/layout';
import { tmpDir } from '../helpers';

const INCLUDE = path.resolve(__dirname, '..', '..', '..', 'guest-driver', 'include');

test("the header's offsets and constants are the C header's", (t) => {
  const dir = tmpDir(t);
  const fields = Object.keys(Off).map((k) => [k, k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)]);
  const src = `#include <stdio.h>
#include <stddef.h>
#include "qcuda_shm.h"
int main(void) {
${fields.map(([k, c]) => `  printf("${k} %zu\\n", offsetof(struct qcuda_shm_hdr, ${c}));`).join('\n')}
  printf("magic= %llu\\nversion= %u\\nhdr= %u\\nring= %u\\n", QCUDA_SHM_MAGIC, QCUDA_SHM_VERSION, QCUDA_SHM_HDR_BYTES, QCUDA_SHM_RING_SIZE);
  return 0;
}
`;
  fs.writeFileSync(path.join(dir, 'l.c'), src);
  execFileSync('gcc', ['-std=gnu11', `-I${INCLUDE}`, '-o', path.join(dir, 'l'), path.join(dir, 'l.c')]);
  const out = execFileSync(path.join(dir, 'l'), { encoding: 'utf8' });
  for (const [k] of fields) t.regex(out, new RegExp(`^${k} ${Off[k as keyof typeof Off]}$`, 'm'), k);
  t.regex(out, new RegExp(`^magic= ${SHM_MAGIC}$`, 'm'));
  t.regex(out, new RegExp(`^version= ${SHM_VERSION}$`, 'm'));
  t.regex(out, new RegExp(`^hdr= ${HDR_BYTES}$`, 'm'));
  t.regex(out, new RegExp(`^ring= ${RING_SIZE}$`, 'm'));
});

test('the layout the backend writes: magic, version, sizes, no generation served', (t) => {
  const page = new ArrayBuffer(HDR_BYTES);
  new Uint8Array(page).fill(0xee);
  new Header(page).writeLayout(512 << 20);
  const v = new DataView(page);
  t.is(v.getBigUint64(Off.magic, true), SHM_MAGIC);
  t.is(v.getUint32(Off.version, true), SHM_VERSION);
  t.is(v.getUint32(Off.hdrBytes, true), HDR_BYTES);
  t.is(v.getBigUint64(Off.regionBytes, true), 512n << 20n);
  t.is(v.getBigUint64(Off.dataOffset, true), BigInt(DATA_OFFSET));
  t.is(v.getBigUint64(Off.dataBytes, true), BigInt((512 << 20) - DATA_OFFSET));
  t.is(v.getBigUint64(Off.dataGpa, true), DATA_GPA);
  t.is(v.getUint32(Off.served, true), 0);
  t.is(v.getBigUint64(Off.owner, true), 0n);
});
