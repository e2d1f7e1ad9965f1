// parseBatch (commands/batch.ts) on its own, beside batch.test.ts (which
// sends whole batches through the device): the framing of entries
// (header, argument bytes, padding to 8), the count, which commands may be
// posted, LAUNCH with its parameters, and exact sizes at every edge. Every
// refusal is BAD_REQUEST, before any entry is returned.
import test, { type ExecutionContext } from 'ava';
import { parseBatch } from '../../backend/src/qcuda/commands/batch';
import { CudaError } from '../../backend/src/qcuda/cuda-error';
import { CALLS, Cmd, cmdName, encode, LAYOUT, Status, type CmdName, type StructName } from '../../backend/src/qcuda/proto';

const HDR = LAYOUT.qcuda_batch_entry.size;
const LAUNCH = LAYOUT.qcuda_args_launch.size;

/** What the protocol lets a batch carry (its BATCH doc); anything else must be refused. */
const POSTED: CmdName[] = [
  'LAUNCH',
  'MEMSET',
  'MEMCPY_DTOD',
  'EVENT_RECORD',
  'STREAM_WAIT_EVENT',
  'HOST_FUNC',
  'MEMCPY_3D_DTOD',
  'MEMSET_2D',
  'LAUNCH_EX',
  'GRAPH_LAUNCH',
];
/** Those whose struct is followed by the kernel's parameters. */
const WITH_PARAMS: CmdName[] = ['LAUNCH', 'LAUNCH_EX'];

/** An entry: its command, its argument bytes, and optionally a len field that lies and padding that differs. */
interface Raw {
  cmd: number;
  args: Uint8Array;
  len?: number;
  pad?: number;
}

/** The bytes of a batch, framed as the guest library frames them (padding to 8 unless told). */
function frame(entries: Raw[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    const h = new Uint8Array(HDR);
    const v = new DataView(h.buffer);
    v.setUint32(0, e.cmd, true);
    v.setUint32(4, e.len ?? e.args.length, true);
    parts.push(h, e.args, new Uint8Array(e.pad ?? (8 - (e.args.length % 8)) % 8));
  }
  return Buffer.concat(parts);
}

/** Argument bytes of a command's struct (16 for one that takes none). */
function args(cmd: CmdName, fill = 0): Uint8Array {
  const d = CALLS[cmd] as { args?: StructName };
  return new Uint8Array(d.args ? LAYOUT[d.args].size : 16).fill(fill);
}
const memset = (dst: bigint) => ({ cmd: Cmd.MEMSET, args: encode('qcuda_args_memset', { dst, size: 8n, stream: 0n, value: 1, async: 1 }) });
const hostFunc = (id: bigint) => ({ cmd: Cmd.HOST_FUNC, args: encode('qcuda_args_host_func', { stream: 0x5n, id }) });
/** A LAUNCH with n bytes of parameters (0x10, 0x11, ...). */
function launch(n: number): Raw {
  const a = new Uint8Array(LAUNCH + n);
  a.set(
    encode('qcuda_args_launch', {
      func: 0x42n,
      stream: 0x7n,
      grid: new Uint32Array([1, 2, 3]),
      block: new Uint32Array([4, 5, 6]),
      param_bytes: n,
    }),
  );
  for (let i = 0; i < n; i++) a[LAUNCH + i] = 0x10 + i;
  return { cmd: Cmd.LAUNCH, args: a };
}

/** parseBatch must refuse: BAD_REQUEST, with a message matching re. */
function refused(t: ExecutionContext, buf: Uint8Array, count: number, re: RegExp, what?: string): void {
  let err: unknown;
  try {
    const got = parseBatch(buf, count);
    t.fail(`${what ?? re}: parsed ${got.length} entries`);
    return;
  } catch (e) {
    err = e;
  }
  t.true(err instanceof CudaError, `${what ?? re}: ${String(err)}`);
  t.is((err as CudaError).code, Status.BAD_REQUEST, what);
  t.regex((err as Error).message, re, what);
}

test('an empty batch of 0 entries is empty; announcing entries it lacks is refused', (t) => {
  t.deepEqual(parseBatch(new Uint8Array(0), 0), []);
  refused(t, new Uint8Array(0), 1, /0 entries, 1 announced/);
});

test('each postable command with exactly its struct: cmd and argument bytes come back as sent', (t) => {
  const list: Raw[] = POSTED.map((name, i) => ({ cmd: Cmd[name], args: args(name, 0xa0 + i) }));
  const buf = frame(list);
  t.is(
    buf.length,
    list.reduce((n, e) => n + HDR + e.args.length, 0),
    'these structs need no padding',
  );
  const got = parseBatch(buf, list.length);
  t.deepEqual(
    got.map((e) => cmdName(e.cmd)),
    POSTED,
  );
  got.forEach((e, i) => t.deepEqual(Buffer.from(e.args), Buffer.from(list[i].args), POSTED[i]));
});

test('every command that is not postable is refused, wherever it stands', (t) => {
  const others = (Object.keys(CALLS) as CmdName[]).filter((k) => !POSTED.includes(k));
  t.true(others.length > 20 && others.includes('MALLOC') && others.includes('BATCH') && others.includes('CALLBACK_WAIT'));
  for (const name of others) {
    const a = args(name);
    refused(t, frame([{ cmd: Cmd[name], args: a }]), 1, new RegExp(`entry 0: command ${name} cannot be posted`), name);
    refused(
      t,
      frame([memset(0x1000n), { cmd: Cmd[name], args: a }, memset(0x1000n)]),
      3,
      new RegExp(`entry 1: command ${name} cannot be posted`),
      `${name} second`,
    );
  }
  refused(t, frame([{ cmd: 0xdead, args: new Uint8Array(16) }]), 1, /command 57005 cannot be posted/, 'an unknown number');
});

test('a posted struct of any other length is refused (shorter, longer, 0)', (t) => {
  for (const name of POSTED.filter((n) => !WITH_PARAMS.includes(n))) {
    const size = args(name).length;
    for (const len of [0, size - 8, size - 1, size + 1, size + 8]) {
      const a = new Uint8Array(len);
      refused(t, frame([{ cmd: Cmd[name], args: a }]), 1, new RegExp(`entry 0: ${len} argument bytes for ${name}`), `${name} of ${len}`);
    }
  }
});

test('LAUNCH: its struct, then any number of parameter bytes, padded to 8; less than the struct is refused', (t) => {
  for (const n of [0, 1, 5, 7, 8, 9, 100, 4000]) {
    const l = launch(n);
    const buf = frame([l, hostFunc(9n)]);
    t.is(buf.length, HDR + Math.ceil((LAUNCH + n) / 8) * 8 + HDR + 16, `${n}: the framing under test`);
    const got = parseBatch(buf, 2);
    t.is(got.length, 2);
    t.is(got[0].cmd, Cmd.LAUNCH);
    t.deepEqual(Buffer.from(got[0].args), Buffer.from(l.args), `${n}: the struct and its parameters, without the padding`);
    t.is(got[1].cmd, Cmd.HOST_FUNC, `${n}: the next entry starts after the padding`);
    t.deepEqual(Buffer.from(got[1].args), Buffer.from(hostFunc(9n).args));
  }
  refused(t, frame([{ cmd: Cmd.LAUNCH, args: new Uint8Array(LAUNCH - 1) }]), 1, new RegExp(`${LAUNCH - 1} argument bytes for LAUNCH`));
  refused(t, frame([{ cmd: Cmd.LAUNCH, args: new Uint8Array(0) }]), 1, /0 argument bytes for LAUNCH/);
});

test('padding is not optional: the last entry too must be padded to 8', (t) => {
  const l = launch(3);
  refused(t, frame([{ ...l, pad: 0 }]), 1, /entry 0 runs past the end/, 'no padding');
  refused(t, frame([{ ...l, pad: 4 }]), 1, /entry 0 runs past the end/, 'short padding');
  t.is(parseBatch(frame([{ ...l, pad: 5 }]), 1).length, 1, 'exactly padded');
  // More padding than needed is taken for the next entry's header.
  refused(t, frame([{ ...l, pad: 13 }]), 1, /more than the 1 entries announced/, 'too much padding');
});

test('an entry whose arguments run past the end is refused, by any amount', (t) => {
  const good = frame([memset(0x1000n), hostFunc(1n)]);
  for (const cut of [1, 8, 15]) refused(t, good.subarray(0, good.length - cut), 2, /entry 1 runs past the end/, `${cut} bytes short`);
  refused(t, frame([{ ...launch(0), len: LAUNCH + 8 }]), 1, /entry 0 runs past the end/, 'a LAUNCH len 8 more than sent');
  refused(t, frame([{ ...launch(0), len: 0x10000 }]), 1, /entry 0 runs past the end/, 'a LAUNCH len larger than any batch');
});

test('a truncated entry header is refused, whatever its length', (t) => {
  const good = frame([memset(0x1000n)]);
  for (let n = 1; n < HDR; n++) {
    const buf = Buffer.concat([good, new Uint8Array(n).fill(0x35)]);
    refused(t, buf, 2, new RegExp(`truncated entry header at byte ${good.length}`), `${n} bytes`);
  }
  refused(t, new Uint8Array(4), 1, /truncated entry header at byte 0/, 'a batch of half a header');
});

test('the count must match exactly: more entries than announced are refused before they are read', (t) => {
  const three = frame([memset(0x1000n), hostFunc(1n), memset(0x2000n)]);
  t.is(parseBatch(three, 3).length, 3);
  refused(t, three, 2, /more than the 2 entries announced/);
  refused(t, three, 0, /more than the 0 entries announced/);
  refused(t, three, 4, /3 entries, 4 announced/);
  // The count is checked before a malformed third entry is even looked at.
  const badThird = Buffer.concat([frame([memset(0x1000n), hostFunc(1n)]), new Uint8Array(3)]);
  refused(t, badThird, 2, /more than the 2 entries announced/);
});

test("the returned arguments are the batch's own bytes, at the right offsets", (t) => {
  const buf = frame([launch(5), memset(0xabcdn)]);
  const [l, m] = parseBatch(buf, 2);
  t.is(l.args.byteOffset - buf.byteOffset, HDR);
  t.is(l.args.length, LAUNCH + 5);
  t.is(m.args.byteOffset - buf.byteOffset, HDR + LAUNCH + 8 + HDR);
  t.is(new DataView(m.args.buffer, m.args.byteOffset).getBigUint64(0, true), 0xabcdn, 'memset dst');
});

// Regression (found by this suite): the padding was computed with 32-bit
// bitwise arithmetic, (len + 7) & ~7, and LAUNCH takes any len at least its
// struct's. A len near 2^32 padded to 0 or a negative number, the bounds
// check passed and the cursor stayed put or moved backwards: a hidden entry
// was parsed, a RangeError escaped, or (len 0xfffffff1..8, count 0xffffffff)
// one 56-byte BATCH kept the event loop busy and the heap growing until the
// backend died of OOM. Such a len must be refused as running past the end.
test('a LAUNCH len near 2^32 is refused as running past the end (padding must not wrap)', (t) => {
  const l = launch(0);
  // padded 0: a HOST_FUNC hidden at byte 8 would be parsed as the second entry.
  const hidden = Buffer.concat([frame([{ cmd: Cmd.LAUNCH, args: new Uint8Array(0), len: 0xffffffff }]), frame([hostFunc(1n)])]);
  refused(t, hidden, 2, /entry 0 runs past the end/, 'len 0xffffffff');
  refused(t, frame([{ ...l, len: 0x80000000 }]), 2, /entry 0 runs past the end/, 'len 0x80000000');
  refused(t, frame([{ ...l, len: 0xfffffff1 }]), 1000, /entry 0 runs past the end/, 'len 0xfffffff1');
});
