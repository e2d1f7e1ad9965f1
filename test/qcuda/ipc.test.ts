// IPC memory handles between the sessions (processes) of one VM (issue 37,
// docs/multi-gpu.md): IPC_GET mints a handle of an allocation, IPC_OPEN in
// another session of the same backend reaches that memory, IPC_CLOSE ends
// it. The refusals: forged bytes, another VM's handle, a pointer inside an
// allocation, the owner opening its own handle, freed memory, a provider
// that cannot share memory.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/device';
import { Cmd } from '../../backend/src/qcuda/proto';
import type { Provider } from '../../backend/src/qcuda/provider';
import { HostProvider } from '../../backend/src/qcuda/providers/host';
import { started } from '../helpers';
import { QcudaClient } from './client';

const INVALID_CONTEXT = 201; // cudaErrorDeviceUninitialized, CUDA's invalid context
const SIZE = 4096;

type Handle = { token: Uint8Array; size: bigint; reserved: Uint8Array };

type GuestView = (addr: bigint, len: number) => Uint8Array[];

/** A host provider that cannot share memory between sessions (as the cuda provider for now). */
function noIpcHost(guestView: GuestView): Provider {
  const p = new HostProvider({ guestView });
  Object.defineProperty(p, 'ipcOpen', { value: undefined });
  return p;
}

async function vm(t: ExecutionContext, provider = (guestView: GuestView): Provider => new HostProvider({ guestView })) {
  const dev = new QcudaDevice({ provider, queues: 2 });
  const { fe } = await started(t, dev, { size: 256 });
  const client = async () => {
    const c = new QcudaClient(fe);
    await c.open();
    return c;
  };
  return { fe, client };
}

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

test('a handle opens in another session: bytes written by either are read by the other', async (t) => {
  const { fe, client } = await vm(t);
  const [owner, opener] = [await client(), await client()];
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
});

test('refused: forged bytes, a pointer inside an allocation, the owner opening its own handle', async (t) => {
  const { client } = await vm(t);
  const [owner, opener] = [await client(), await client()];
  const ptr = await malloc(owner);
  const { handle } = await get(owner, ptr);
  t.is((await get(owner, ptr + 16n)).status, CudaErr.InvalidValue);
  t.is((await get(opener, ptr)).status, CudaErr.InvalidValue, "another session's allocation");
  const forged = { ...handle!, token: handle!.token.map((b) => b ^ 1) };
  t.is((await open(opener, forged)).status, CudaErr.InvalidResourceHandle);
  t.is((await open(opener, { ...handle!, size: 1n })).status, CudaErr.InvalidResourceHandle, 'the size is part of the handle');
  t.is((await open(owner, handle!)).status, INVALID_CONTEXT);
});

test("refused: another VM's handle", async (t) => {
  const a = await vm(t);
  const b = await vm(t);
  const owner = await a.client();
  const { handle } = await get(owner, await malloc(owner));
  t.is((await open(await b.client(), handle!)).status, CudaErr.InvalidResourceHandle);
});

test("the owner's free, reset or exit takes the memory from its openers", async (t) => {
  const { fe, client } = await vm(t);
  const [owner, opener] = [await client(), await client()];
  const out = fe.mem.alloc(SIZE);

  const ptr = await malloc(owner);
  const { handle } = await get(owner, ptr);
  const there = (await open(opener, handle!)).value;
  t.is((await owner.free(ptr)).status, 0);
  t.is(await opener.dtoh(out, there, 16), CudaErr.InvalidValue, 'freed: the opener no longer reaches it');
  t.is(await close(opener, there), CudaErr.InvalidValue, 'its opening went with it');
  t.is((await open(await client(), handle!)).status, CudaErr.InvalidResourceHandle, "a freed allocation's handle");

  const p2 = await malloc(owner);
  const h2 = (await get(owner, p2)).handle!;
  t.is((await open(opener, h2)).status, 0);
  t.is((await owner.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(await opener.dtoh(out, p2, 16), CudaErr.InvalidValue, 'reset: gone');
  t.is((await open(await client(), h2)).status, CudaErr.InvalidResourceHandle);

  const p3 = await malloc(owner);
  const h3 = (await get(owner, p3)).handle!;
  t.is((await open(opener, h3)).status, 0);
  t.is((await owner.close()).status, 0);
  t.is(await opener.dtoh(out, p3, 16), CudaErr.InvalidValue, 'exit: gone');
});

test('a provider that cannot share memory between processes refuses with NotSupported', async (t) => {
  const { client } = await vm(t, noIpcHost);
  const owner = await client();
  t.is((await get(owner, await malloc(owner))).status, CudaErr.NotSupported);
});
