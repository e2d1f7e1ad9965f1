// IPC memory and event handles between the sessions (processes) of one VM
// (issue 37, docs/multi-gpu.md): IPC_GET mints a handle of an allocation,
// IPC_OPEN in another session of the same backend reaches that memory,
// IPC_CLOSE ends it; IPC_EVENT_GET / IPC_EVENT_OPEN the same for events. On
// the emu provider and on the cuda provider with a worker per session (the
// fake driver: CUDA's handles made in one worker process and opened in
// another, the bytes crossing between them). The refusals: forged bytes,
// another VM's handle, a pointer inside an allocation, the owner opening its
// own handle, freed memory, an event not made interprocess, a provider that
// cannot share.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { Cmd } from '../../backend/src/qcuda/proto';
import type { Provider } from '../../backend/src/qcuda/provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import type { QcudaClient } from './client';
import { PROVIDERS, sharingVm, type GuestView, type MakeProvider } from './sharing-vm';

const INVALID_CONTEXT = 201; // cudaErrorDeviceUninitialized, CUDA's invalid context
const SIZE = 4096;
const EVENT_IPC = 0x6; // cudaEventInterprocess | cudaEventDisableTiming
type Handle = { token: Uint8Array; size: bigint; reserved: Uint8Array };

/** An emu provider that cannot share memory or events between sessions. */
function noIpcHost(guestView: GuestView): Provider {
  const p = new EmuProvider({ guestView });
  Object.defineProperty(p, 'ipcOpen', { value: undefined });
  Object.defineProperty(p, 'ipcEventOpen', { value: undefined });
  return p;
}

const vm = sharingVm;

async function get(c: QcudaClient, ptr: bigint): Promise<{ status: number; handle?: Handle }> {
  const r = await c.call(Cmd.IPC_GET, { args: ['qcuda_args_ptr', { ptr }], out: 'qcuda_ipc_handle' });
  return { status: r.status, handle: r.status === 0 ? (r.out as unknown as Handle) : undefined };
}

const open = (c: QcudaClient, h: Handle) => c.call(Cmd.IPC_OPEN, { args: ['qcuda_ipc_handle', { ...h }] });
const close = async (c: QcudaClient, ptr: bigint) => (await c.call(Cmd.IPC_CLOSE, { args: ['qcuda_args_ptr', { ptr }] })).status;

async function malloc(c: QcudaClient): Promise<bigint> {
  const r = await c.malloc(SIZE);
  if (r.status !== 0) throw new Error(`malloc: ${r.status}`);
  return r.value;
}

async function event(c: QcudaClient, flags: number): Promise<bigint> {
  const r = await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags, reserved: 0 }] });
  if (r.status !== 0) throw new Error(`event create: ${r.status}`);
  return r.value;
}

async function getEvent(c: QcudaClient, handle: bigint): Promise<{ status: number; handle?: Handle }> {
  const r = await c.call(Cmd.IPC_EVENT_GET, { args: ['qcuda_args_handle', { handle }], out: 'qcuda_ipc_handle' });
  return { status: r.status, handle: r.status === 0 ? (r.out as unknown as Handle) : undefined };
}

const openEvent = (c: QcudaClient, h: Handle) => c.call(Cmd.IPC_EVENT_OPEN, { args: ['qcuda_ipc_handle', { ...h }] });
const onEvent = async (c: QcudaClient, cmd: number, handle: bigint) =>
  (await c.call(cmd, { args: ['qcuda_args_handle', { handle }] })).status;

async function bytesBothWays(t: ExecutionContext, make: MakeProvider) {
  const { fe, client, provider } = await vm(t, make);
  const [owner, opener] = [await client(), await client()];
  if (make.ownQueues) t.is((provider() as IsolatedProvider).ownerPids.length, 2, "each session's queue served by its worker");
  const ptr = await malloc(owner);
  const { status, handle } = await get(owner, ptr);
  t.is(status, 0);
  t.is(handle!.size, BigInt(SIZE));
  t.deepEqual((await get(owner, ptr)).handle!.token, handle!.token, 'one handle per allocation');

  const buf = fe.mem.alloc(SIZE);
  fe.mem.bytes(buf, SIZE).fill(0x5a);
  t.is(await owner.htod(ptr, buf, SIZE), 0);

  const o = await open(opener, handle!);
  t.is(o.status, 0);
  const there = o.value;
  const out = fe.mem.alloc(SIZE);
  t.is(await opener.dtoh(out, there, SIZE), 0);
  t.true(
    fe.mem.bytes(out, SIZE).every((b) => b === 0x5a),
    "the opener reads the owner's bytes",
  );

  fe.mem.bytes(buf, SIZE).fill(0xa5);
  t.is(await opener.htod(there + 100n, buf, 16), 0);
  t.is(await owner.dtoh(out, ptr + 100n, 16), 0);
  t.true(
    fe.mem.bytes(out, 16).every((b) => b === 0xa5),
    "the owner reads the opener's bytes",
  );

  t.is((await opener.free(there)).status, CudaErr.InvalidValue, 'the opener cannot free what it opened');
  t.is((await open(opener, handle!)).status, CudaErr.InvalidValue, 'opened already');
  t.is(await close(opener, there), 0);
  t.is(await opener.dtoh(out, there, 16), CudaErr.InvalidValue, 'closed: no longer reachable');
  t.is(await close(opener, there), CudaErr.InvalidValue, 'closed twice');
  t.is((await open(opener, handle!)).status, 0, 'opened again after the close');
}

async function refusals(t: ExecutionContext, make: MakeProvider) {
  const { client } = await vm(t, make);
  const [owner, opener] = [await client(), await client()];
  const ptr = await malloc(owner);
  const { handle } = await get(owner, ptr);
  t.is((await get(owner, ptr + 16n)).status, CudaErr.InvalidValue);
  t.is((await get(opener, ptr)).status, CudaErr.InvalidValue, "another session's allocation");
  const forged = { ...handle!, token: handle!.token.map((b) => b ^ 1) };
  t.is((await open(opener, forged)).status, CudaErr.InvalidResourceHandle);
  t.is((await open(opener, { ...handle!, size: 1n })).status, CudaErr.InvalidResourceHandle, 'the size is part of the handle');
  t.is((await open(owner, handle!)).status, INVALID_CONTEXT);
  const other = await vm(t, make);
  t.is((await open(await other.client(), handle!)).status, CudaErr.InvalidResourceHandle, "another VM's handle");
}

async function ownerEnds(t: ExecutionContext, make: MakeProvider) {
  const { fe, client } = await vm(t, make);
  const [owner, opener] = [await client(), await client()];
  const out = fe.mem.alloc(SIZE);

  const ptr = await malloc(owner);
  const { handle } = await get(owner, ptr);
  /** Opens h in the opener and checks that it reaches the memory: its address there. */
  const reached = async (h: Handle) => {
    const o = await open(opener, h);
    t.is(o.status, 0);
    t.is(await opener.dtoh(out, o.value, 16), 0, 'opened: reachable');
    return o.value;
  };
  const there = await reached(handle!);
  t.is((await owner.free(ptr)).status, 0);
  t.is(await opener.dtoh(out, there, 16), CudaErr.InvalidValue, 'freed: the opener no longer reaches it');
  t.is(await close(opener, there), 0, 'closing what its owner freed succeeds, as with CUDA (NCCL tears down in any order)');
  t.is(await close(opener, there), CudaErr.InvalidValue, 'once');
  t.is((await open(await client(), handle!)).status, CudaErr.InvalidResourceHandle, "a freed allocation's handle");

  const p2 = await malloc(owner);
  const h2 = (await get(owner, p2)).handle!;
  const at2 = await reached(h2);
  t.is((await owner.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(await opener.dtoh(out, at2, 16), CudaErr.InvalidValue, 'reset: gone');
  t.is((await open(await client(), h2)).status, CudaErr.InvalidResourceHandle);

  const p3 = await malloc(owner);
  const h3 = (await get(owner, p3)).handle!;
  const at3 = await reached(h3);
  t.is((await owner.close()).status, 0);
  t.is(await opener.dtoh(out, at3, 16), CudaErr.InvalidValue, 'exit: gone');
  t.not(await malloc(opener), 0n, 'the opener carries on');
}

async function eventOpened(t: ExecutionContext, make: MakeProvider) {
  const { client } = await vm(t, make);
  const [owner, opener] = [await client(), await client()];
  const ev = await event(owner, EVENT_IPC);
  const { status, handle } = await getEvent(owner, ev);
  t.is(status, 0);
  t.is(handle!.size, 0n);
  t.deepEqual((await getEvent(owner, ev)).handle!.token, handle!.token, 'one handle per event');
  t.is((await owner.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: ev, stream: 0n }] })).status, 0);

  const o = await openEvent(opener, handle!);
  t.is(o.status, 0);
  const there = o.value;
  const wait = { stream: 0n, event: there, flags: 0, reserved: 0 };
  t.is((await opener.call(Cmd.STREAM_WAIT_EVENT, { args: ['qcuda_args_stream_wait_event', wait] })).status, 0);
  t.is(await onEvent(opener, Cmd.EVENT_SYNC, there), 0);
  t.is(await onEvent(opener, Cmd.EVENT_QUERY, there), 0);
  t.is(await onEvent(opener, Cmd.EVENT_DESTROY, there), 0, "the opened event is the opener's to destroy");
  t.is(await onEvent(opener, Cmd.EVENT_QUERY, there), CudaErr.InvalidResourceHandle);
  t.is(await onEvent(owner, Cmd.EVENT_QUERY, ev), 0, "the owner's event stays");
}

async function eventRefusals(t: ExecutionContext, make: MakeProvider) {
  const { client } = await vm(t, make);
  const [owner, opener] = [await client(), await client()];
  t.is((await getEvent(owner, await event(owner, 0))).status, CudaErr.InvalidValue, 'not interprocess');
  t.is((await getEvent(owner, await event(owner, 0x4))).status, CudaErr.InvalidValue, 'interprocess, but timed');
  t.is((await getEvent(owner, 12345n)).status, CudaErr.InvalidResourceHandle, 'no such event');
  const ev = await event(owner, EVENT_IPC);
  const { handle } = await getEvent(owner, ev);
  t.is((await openEvent(opener, { ...handle!, token: handle!.token.map((b) => b ^ 1) })).status, CudaErr.InvalidResourceHandle);
  t.is((await openEvent(opener, { ...handle!, size: 1n })).status, CudaErr.InvalidResourceHandle, 'the size is part of the handle');
  t.is((await open(opener, handle!)).status, CudaErr.InvalidResourceHandle, 'an event handle is no memory handle');
  t.is((await openEvent(owner, handle!)).status, INVALID_CONTEXT);
  const other = await vm(t, make);
  t.is((await openEvent(await other.client(), handle!)).status, CudaErr.InvalidResourceHandle, "another VM's");
  t.is(await onEvent(owner, Cmd.EVENT_DESTROY, ev), 0);
  t.is((await openEvent(opener, handle!)).status, CudaErr.InvalidResourceHandle, "a destroyed event's handle");
}

/** Attributes 119 (MEMPOOL_SUPPORTED_HANDLE_TYPES) and 125 (IPC_EVENT_SUPPORTED) of device 0. */
async function ipcAttributes(c: QcudaClient): Promise<[number, number]> {
  const r = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 0 }], out: 'qcuda_out_device_props' });
  const attrs = r.out!.attrs as Uint32Array;
  return [attrs[119], attrs[125]];
}

for (const [name, make] of PROVIDERS) {
  test(`${name}: the device says pools export POSIX fds and event handles are served (attributes 119, 125)`, async (t) => {
    const { client } = await vm(t, make);
    t.deepEqual(await ipcAttributes(await client()), [1, 1]);
  });
  test(`${name}: a handle opens in another session: bytes written by either are read by the other`, (t) => bytesBothWays(t, make));
  test(`${name}: refused: forged bytes, a pointer inside an allocation, the owner's own handle, another VM's`, (t) => refusals(t, make));
  test(`${name}: the owner's free, reset or exit takes the memory from its openers`, (t) => ownerEnds(t, make));
  test(`${name}: an event handle opens in another session, which waits on it, synchronizes and queries it`, (t) => eventOpened(t, make));
  test(`${name}: event handles refused: not interprocess, forged, the owner's own, destroyed, another VM's`, (t) => eventRefusals(t, make));
}

test('a provider that cannot share memory or events between processes refuses with NotSupported', async (t) => {
  const { client } = await vm(t, noIpcHost);
  const owner = await client();
  t.is((await get(owner, await malloc(owner))).status, CudaErr.NotSupported);
  t.is((await getEvent(owner, await event(owner, EVENT_IPC))).status, CudaErr.NotSupported);
  t.deepEqual(await ipcAttributes(owner), [0, 0], 'and its device does not claim them');
});

test('host-memory workers (a process per session, no CUDA) cannot share: NotSupported at IPC_GET', async (t) => {
  const { client } = await vm(t, () => new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } }));
  const owner = await client();
  t.is((await get(owner, await malloc(owner))).status, CudaErr.NotSupported);
});
