// What a queue owner's worker asks of the VM's IPC and VMM-share tables
// (ipc-remote.ts IpcService, vmm-remote.ts VmmShareService) comes from a
// process that runs guest-chosen code: every field is checked. Malformed
// asks (wrong types, sizes, out-of-range values, unknown ops and kinds, not
// an object at all) are refused with a CUDA error the worker passes on, the
// service never throws, and it answers well-formed asks as before. The
// session is a real one of an emu-provider device.
import test from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { IpcService, type IpcAsk } from '../../backend/src/qcuda/ipc/ipc-remote';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { started } from '../helpers';
import { QcudaClient } from './client';

const TOKEN = new Uint8Array(16);

/** Asks as a worker could send them: each must be refused. */
const MALFORMED: [string, unknown][] = [
  ['not an object', null],
  ['a number', 7],
  ['no kind', { op: 'mint', ptr: 1n, size: 1n, device: 0 }],
  ['an unknown kind', { op: 'mint', kind: 'disk', ptr: 1n, size: 1n, device: 0 }],
  ['an unknown op', { op: 'steal', kind: 'mem' }],
  ['a pointer as a number', { op: 'mint', kind: 'mem', ptr: 4096, size: 1n, device: 0 }],
  ['a negative size', { op: 'mint', kind: 'mem', ptr: 4096n, size: -1n, device: 0 }],
  ['a size past 64 bits', { op: 'mint', kind: 'mem', ptr: 4096n, size: 1n << 64n, device: 0 }],
  ['a device past the last', { op: 'mint', kind: 'mem', ptr: 4096n, size: 1n, device: 1 }],
  ['a fractional device', { op: 'mint', kind: 'mem', ptr: 4096n, size: 1n, device: 0.5 }],
  ["CUDA's handle of 63 bytes", { op: 'mint', kind: 'mem', ptr: 4096n, size: 1n, device: 0, exported: new Uint8Array(63) }],
  ['a token of 15 bytes', { op: 'claim', kind: 'mem', token: new Uint8Array(15), size: 1n }],
  ['a token as a string', { op: 'claim', kind: 'event', token: '00'.repeat(16), size: 0n }],
  ['a settle at a string', { op: 'settle', kind: 'mem', token: TOKEN, at: '4096' }],
  ['a close of no pointer', { op: 'close', kind: 'mem' }],
  ['a VMM mint of a negative handle', { op: 'mint', kind: 'vmm', handle: -1n, size: 1n, device: 0 }],
  ['a VMM mint on no device', { op: 'mint', kind: 'vmm', handle: 1n, size: 1n, device: -1 }],
  ['a VMM import of a short token', { op: 'import', kind: 'vmm', token: new Uint8Array(8), size: 1n }],
  ['a VMM import of a token no one minted', { op: 'import', kind: 'vmm', token: TOKEN, size: 1n }],
  ['a VMM imported of a short token string', { op: 'imported', kind: 'vmm', token: 'ab', handle: 1n }],
  ['a VMM unimported of a token as bytes', { op: 'unimported', kind: 'vmm', token: TOKEN, handle: 1n }],
  ['an unknown VMM op', { op: 'export-all', kind: 'vmm' }],
  // The ops are the tables' methods a worker may call (ipc.ts IPC_ASKS, vmm-share.ts VMM_ASKS), and no other name.
  ['a table method answered in the worker', { op: 'minted', kind: 'mem', ptr: 4096n }],
  ['a VMM table method answered in the worker', { op: 'servedBy', kind: 'vmm' }],
  ["a table's find", { op: 'find', kind: 'vmm', token: TOKEN, size: 1n }],
  ["the object's constructor", { op: 'constructor', kind: 'mem' }],
  ["the object's prototype", { op: '__proto__', kind: 'event' }],
  ['an op that is no string', { op: ['mint'], kind: 'mem', ptr: 4096n, size: 1n, device: 0 }],
];

test("a worker's malformed IPC and VMM-share asks are refused, and the service goes on answering", async (t) => {
  const provider = new EmuProvider({});
  t.teardown(() => provider.close());
  const dev = new QcudaDevice({ provider, queues: 2, limits: {} });
  const { fe } = await started(t, dev, { size: 64 });
  const client = new QcudaClient(fe);
  await client.open();
  const session = [...dev.sessions.values()][0];
  const service = new IpcService(dev.vm, session, provider.deviceCount());

  for (const [what, ask] of MALFORMED) {
    const a = await service.answer(ask as IpcAsk);
    t.false(a.ok, what);
    if (!a.ok) {
      t.is(a.code, CudaErr.InvalidValue, `${what}: ${a.message}`);
      t.true(a.message.length > 0, `${what}: says why`);
    }
    t.is((a as { fd?: unknown }).fd, undefined, `${what}: no fd handed over`);
  }

  // Well-formed asks still work: a handle minted, found again, its claim refused to its own owner.
  const minted = await service.answer({ op: 'mint', kind: 'mem', ptr: 4096n, size: 64n, device: 0, exported: undefined });
  t.true(minted.ok);
  const again = await service.answer({ op: 'mint', kind: 'mem', ptr: 4096n, size: 64n, device: 0, exported: undefined });
  t.deepEqual(again, minted, 'one token per allocation');
  const token = Buffer.from((minted as { v: string }).v, 'hex');
  const own = await service.answer({ op: 'claim', kind: 'mem', token: new Uint8Array(token), size: 64n });
  t.false(own.ok, "the owner's own handle");
  t.is(await service.answer({ op: 'forget', kind: 'mem', ptr: 4096n }).then((a) => a.ok), true);
  const gone = await service.answer({ op: 'claim', kind: 'mem', token: new Uint8Array(token), size: 64n });
  t.deepEqual(gone.ok ? undefined : gone.code, CudaErr.InvalidResourceHandle, 'forgotten: names nothing');
});
