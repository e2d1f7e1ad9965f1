// Device output (printf, assert) on its way to the guest, on the host
// provider with output injected through the sink each session hands the
// provider: QCUDA_ST_OUTPUT on the replies of that session only,
// OUTPUT_READ in order with kinds, the per-session bound, bad OUTPUT_READ
// requests, and what close and cudaDeviceReset do with waiting output.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { MAX_SESSION_OUTPUT } from '../../backend/src/qcuda/session/output';
import type { OutputSink } from '../../backend/src/qcuda/provider';
import { Cmd, QCUDA_CHUNK, QCUDA_OUTPUT_STDERR, QCUDA_OUTPUT_STDOUT, QCUDA_ST_OUTPUT, Status } from '../../backend/src/qcuda/proto';
import { started } from '../helpers';
import { QcudaClient, type Reply } from './client';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';

const enc = (s: string) => new TextEncoder().encode(s);

async function setup(t: ExecutionContext) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 2 });
  // The sink each session's context is opened with, in the order the contexts are made.
  const sinks: OutputSink[] = [];
  const open = dev.provider.openContext.bind(dev.provider);
  dev.provider.openContext = (device: number, sink?: OutputSink) => {
    sinks.push(sink!);
    return open(device, sink);
  };
  const pair = await started(t, dev, { size: 64 });
  const a = new QcudaClient(pair.fe, undefined, 16);
  const b = new QcudaClient(pair.fe, undefined, 16);
  await a.open();
  await b.open();
  // A context each (MALLOC makes it): a's sink first.
  t.is((await a.malloc(64)).status, 0);
  t.is((await b.malloc(64)).status, 0);
  t.is(sinks.length, 2);
  const buf = pair.fe.mem.alloc(64 << 10, 4096);
  return { dev, fe: pair.fe, a, b, sinkA: sinks[0], sinkB: sinks[1], buf };
}

const info = (c: QcudaClient) => c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' });

interface Read {
  r: Reply;
  kind: number;
  more: number;
  text: string;
}

async function read(c: QcudaClient, gpa: bigint, len = 64 << 10): Promise<Read> {
  const r = await c.call(Cmd.OUTPUT_READ, { out: 'qcuda_out_output_read', from: [{ gpa, len }] });
  const text = Buffer.from(c.fe.mem.bytes(gpa, Number(r.value))).toString('latin1');
  return { r, kind: r.out?.kind as number, more: r.out?.more as number, text };
}

test('output reaches its own session only: the flag on its replies, OUTPUT_READ in order with kinds', async (t) => {
  const { a, b, sinkA, buf } = await setup(t);
  sinkA(1, enc('hello '));
  sinkA(1, enc('world\n'));
  sinkA(2, enc('k.cu:5: void k(int): block: [0,0,0], thread: [0,0,0] Assertion `x == 0` failed.\n'));
  sinkA(1, enc('after\n'));
  t.is((await info(b)).status, 0, 'the other session sees no flag');
  t.is((await info(a)).status, QCUDA_ST_OUTPUT, 'success, with the flag');
  t.is((await a.free(0x1234n)).status, CudaErr.InvalidValue | QCUDA_ST_OUTPUT, 'a failure keeps its status beside the flag');
  t.is(
    (await a.call(Cmd.MALLOC, { rawArgs: new Uint8Array(4) })).status,
    Status.BAD_REQUEST | QCUDA_ST_OUTPUT,
    'so does a refused request',
  );
  t.is(
    (await b.call(Cmd.OUTPUT_READ, { out: 'qcuda_out_output_read', from: [{ gpa: buf, len: 4096 }] })).value,
    0n,
    'the other session has nothing to read',
  );

  let x = await read(a, buf);
  t.deepEqual(
    [x.r.status, x.kind, x.more, x.text],
    [QCUDA_ST_OUTPUT, QCUDA_OUTPUT_STDOUT, 1, 'hello world\n'],
    'consecutive pieces of one kind come together',
  );
  t.is(x.r.value, 12n);
  x = await read(a, buf);
  t.deepEqual([x.kind, x.more], [QCUDA_OUTPUT_STDERR, 1]);
  t.regex(x.text, /^k\.cu:5: .* Assertion `x == 0` failed\.\n$/);
  x = await read(a, buf);
  t.deepEqual([x.r.status, x.kind, x.more, x.text], [0, QCUDA_OUTPUT_STDOUT, 0, 'after\n'], 'the last piece: no flag, nothing more');
  x = await read(a, buf);
  t.deepEqual([x.r.status, x.r.value, x.kind, x.more], [0, 0n, 0, 0], 'nothing waits');
  t.is((await info(a)).status, 0);

  // A buffer smaller than the output: pieces in order.
  sinkA(1, enc('0123456789'));
  const got: string[] = [];
  for (;;) {
    x = await read(a, buf, 4);
    if (x.r.value === 0n) break;
    got.push(x.text);
  }
  t.deepEqual(got, ['0123', '4567', '89']);
});

test('a session keeps at most MAX_SESSION_OUTPUT bytes: the rest is dropped, a note takes its place', async (t) => {
  const { dev, a, sinkA, buf } = await setup(t);
  const big = 700 << 10;
  sinkA(1, new Uint8Array(big).fill(0x61));
  sinkA(1, new Uint8Array(big).fill(0x62));
  sinkA(2, enc('lost too\n'));
  t.is(dev.sessions.get(a.session)!.output.size, MAX_SESSION_OUTPUT);
  const dropped = 2 * big - MAX_SESSION_OUTPUT + 'lost too\n'.length;
  let stdout = '';
  let x: Read;
  for (;;) {
    x = await read(a, buf);
    if (x.kind !== QCUDA_OUTPUT_STDOUT) break;
    stdout += x.text;
  }
  t.is(stdout.length, MAX_SESSION_OUTPUT);
  t.is(stdout, 'a'.repeat(big) + 'b'.repeat(MAX_SESSION_OUTPUT - big), 'what fitted, in order');
  t.deepEqual([x.kind, x.text, x.more, x.r.status], [QCUDA_OUTPUT_STDERR, `[qcuda: ${dropped} bytes of device output dropped]\n`, 0, 0]);
  sinkA(1, enc('flows again\n'));
  x = await read(a, buf);
  t.deepEqual([x.kind, x.text], [QCUDA_OUTPUT_STDOUT, 'flows again\n']);
});

test('OUTPUT_READ refuses bad requests clearly and consumes nothing then', async (t) => {
  const { a, fe, sinkA, buf } = await setup(t);
  sinkA(1, enc('kept\n'));
  const bad = async (what: string, o: Parameters<QcudaClient['call']>[1]) => {
    const r = await a.call(Cmd.OUTPUT_READ, o);
    t.is(r.status, Status.BAD_REQUEST | QCUDA_ST_OUTPUT, what);
  };
  await bad('no buffer', { out: 'qcuda_out_output_read' });
  await bad('a buffer at an offset (a chunk of a larger read)', {
    out: 'qcuda_out_output_read',
    from: [{ gpa: buf, len: 4096 }],
    dataOffset: 4096n,
  });
  const huge = fe.mem.alloc(QCUDA_CHUNK + 4096, 4096, 1);
  await bad('more than one chunk', { out: 'qcuda_out_output_read', from: [{ gpa: huge, len: QCUDA_CHUNK + 1 }] });
  await bad('arguments', { out: 'qcuda_out_output_read', rawArgs: new Uint8Array(8), from: [{ gpa: buf, len: 4096 }] });
  await bad('no room for the output struct', { outLen: 0, from: [{ gpa: buf, len: 4096 }] });
  const x = await read(a, huge, QCUDA_CHUNK);
  t.deepEqual([x.r.status, x.kind, x.text], [0, QCUDA_OUTPUT_STDOUT, 'kept\n'], 'a whole chunk is fine');
});

test("cudaDeviceReset keeps waiting output (natively it prints it); close and the VM's reset drop it", async (t) => {
  const { dev, a, b, sinkA, sinkB, buf } = await setup(t);
  sinkA(1, enc('before reset\n'));
  t.is((await a.call(Cmd.DEVICE_RESET)).status, QCUDA_ST_OUTPUT);
  t.is((await read(a, buf)).text, 'before reset\n');
  const qa = dev.sessions.get(a.session)!.output;
  sinkA(1, enc('at close\n'));
  t.is((await a.close()).status, 0);
  t.false(qa.pending, 'dropped with the session');
  sinkA(1, enc('after close\n'));
  t.false(qa.pending, 'and nothing is taken after');
  const qb = dev.sessions.get(b.session)!.output;
  sinkB(2, enc('at VM reset\n'));
  await dev.reset();
  t.false(qb.pending);
});
