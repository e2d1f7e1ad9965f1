// The protocol is declared once (backend/src/qcuda/wire/protocol.ts); the C
// header and the guest library's builders are generated from it (whether
// they are current: test/tools/generated.test.ts). Checked here: C lays
// every struct out as the backend's layout computation does (a C program
// prints sizeof/offsetof of every struct and field and the value of every
// constant, compiled against the header; every line must match).
import test from 'ava';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as P from '../../backend/src/qcuda/proto';
import { tmpDir } from '../helpers';

const root = path.resolve(__dirname, '..', '..', '..');
const header = path.join(root, 'guest-driver/include/qcuda_proto.h');

const CONSTANTS: Record<string, number | bigint> = {
  VIRTIO_ID_QCUDA: P.VIRTIO_ID_QCUDA,
  QCUDA_MAGIC: P.QCUDA_MAGIC,
  QCUDA_PROTO_VERSION: P.QCUDA_PROTO_VERSION,
  QCUDA_CONFIG_SIZE: P.QCUDA_CONFIG_SIZE,
  QCUDA_CAP_GPU: P.QCUDA_CAP_GPU,
  QCUDA_MAX_ARGS: P.QCUDA_MAX_ARGS,
  QCUDA_MAX_OUT: P.QCUDA_MAX_OUT,
  QCUDA_CHUNK: P.QCUDA_CHUNK,
  QCUDA_NUM_ATTRS: P.QCUDA_NUM_ATTRS,
  QCUDA_STREAM_LEGACY: P.QCUDA_STREAM_LEGACY,
  QCUDA_STREAM_PER_THREAD: P.QCUDA_STREAM_PER_THREAD,
  QCUDA_MAX_MODULE: P.QCUDA_MAX_MODULE,
  QCUDA_MAX_PARAMS: P.QCUDA_MAX_PARAMS,
  QCUDA_MAX_PARAM_BYTES: P.QCUDA_MAX_PARAM_BYTES,
  QCUDA_MAX_NAME: P.QCUDA_MAX_NAME,
  QCUDA_MAX_BATCH: P.QCUDA_MAX_BATCH,
  QCUDA_NUM_FUNC_ATTRS: P.QCUDA_NUM_FUNC_ATTRS,
  QCUDA_ATTR_VALUE_BYTES: P.QCUDA_ATTR_VALUE_BYTES,
  QCUDA_ST_OUTPUT: P.QCUDA_ST_OUTPUT,
  QCUDA_OUTPUT_STDOUT: P.QCUDA_OUTPUT_STDOUT,
  QCUDA_OUTPUT_STDERR: P.QCUDA_OUTPUT_STDERR,
  ...Object.fromEntries(
    Object.entries(P.Cmd)
      .filter(([, v]) => typeof v === 'number')
      .map(([k, v]) => [`QCUDA_CMD_${k}`, v as number]),
  ),
  ...Object.fromEntries(
    Object.entries(P.Status)
      .filter(([, v]) => typeof v === 'number')
      .map(([k, v]) => [`QCUDA_ST_${k}`, v as number]),
  ),
};

function checker(): string {
  const lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "qcuda_proto.h"', 'int main(void) {'];
  for (const [s, layout] of Object.entries(P.LAYOUT)) {
    lines.push(`printf("sizeof ${s} %zu\\n", sizeof(struct ${s}));`);
    for (const f of layout.fields) lines.push(`printf("offsetof ${s}.${f.name} %zu\\n", offsetof(struct ${s}, ${f.name}));`);
  }
  for (const c of Object.keys(CONSTANTS)) lines.push(`printf("value ${c} %llu\\n", (unsigned long long)(${c}));`);
  lines.push('return 0; }');
  return lines.join('\n');
}

function expected(): string {
  const out: string[] = [];
  for (const [s, layout] of Object.entries(P.LAYOUT)) {
    out.push(`sizeof ${s} ${layout.size}`);
    for (const f of layout.fields) out.push(`offsetof ${s}.${f.name} ${f.offset}`);
  }
  for (const [c, v] of Object.entries(CONSTANTS)) out.push(`value ${c} ${v}`);
  return `${out.join('\n')}\n`;
}

test('TypeScript and C agree on every struct, field offset and constant', (t) => {
  const dir = tmpDir(t);
  fs.writeFileSync(path.join(dir, 'check.c'), checker());
  execFileSync('gcc', ['-Wall', '-Werror', '-I', path.dirname(header), '-o', path.join(dir, 'check'), path.join(dir, 'check.c')]);
  t.is(execFileSync(path.join(dir, 'check'), { encoding: 'utf8' }), expected());
});

test('every command and status the header defines is in the mirror', (t) => {
  const text = fs.readFileSync(header, 'utf8');
  const names = [...text.matchAll(/^\s*(QCUDA_(?:CMD|ST)_\w+)\s*=/gm)].map((m) => m[1]);
  t.true(names.length > 20);
  for (const n of names) t.true(n in CONSTANTS, `${n} is missing from backend/src/qcuda/proto.ts`);
  const structs = [...text.matchAll(/^struct (\w+) \{/gm)].map((m) => m[1]);
  for (const s of structs) t.true(s in P.LAYOUT, `struct ${s} is missing from the mirror`);
});

// The codecs work in a scratch buffer of their own (wire/layout.ts): what they
// hand out must never be that buffer, nor change when it is used again.
test('encode returns a new array each time; decode reads its own copy of the bytes and leaves the input alone', (t) => {
  const a = P.encode('qcuda_resp_hdr', { status: 1, len: 2, value: 3n });
  const b = P.encode('qcuda_resp_hdr', { status: 9 });
  t.not(a, b);
  t.deepEqual(P.decode('qcuda_resp_hdr', a), { status: 1, len: 2, value: 3n }, 'the first is unchanged by the second');
  t.deepEqual(P.decode('qcuda_resp_hdr', b), { status: 9, len: 0, value: 0n }, 'fields not given are 0, not what the last encode left');
  const wire = new Uint8Array(a.length + 8).fill(0xee);
  wire.set(a);
  const copy = wire.slice();
  const d = P.decode('qcuda_resp_hdr', wire);
  t.deepEqual(wire, copy, 'the input is not written');
  wire.fill(0);
  t.deepEqual(d, { status: 1, len: 2, value: 3n });
  const sym = P.decode('qcuda_args_symbol', P.encode('qcuda_args_symbol', { module: 5n, name: 'f' }));
  const again = P.decode('qcuda_args_symbol', P.encode('qcuda_args_symbol', { module: 6n, name: 'g' }));
  t.is(sym.name[0], 'f'.charCodeAt(0), 'a decoded byte array is a copy, not a view of the scratch buffer');
  t.is(again.name[0], 'g'.charCodeAt(0));
});
