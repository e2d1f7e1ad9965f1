// Function attributes, occupancy, limits, stream attributes and cooperative
// launches (commands 60-68) against the emu provider, through the test
// frontend as the guest driver sends them: bad handles, attribute ids and
// values are refused with CUDA's error codes, limits and stream attributes
// keep what is set per context / stream, and nothing one session sets shows
// in another.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, LAYOUT, QCUDA_ATTR_VALUE_BYTES, QCUDA_MAX_ARGS, Status } from '../../backend/src/qcuda/proto';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';

const MIB = 1n << 20n;

async function setup(t: ExecutionContext, memoryLimit?: bigint) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 2, memoryLimit });
  const pair = await started(t, dev, { size: 256 });
  const c = new QcudaClient(pair.fe);
  await c.open();
  return { c, fe: pair.fe };
}

// ---- requests

const funcAttrs = (c: QcudaClient, handle: bigint) =>
  c.call(Cmd.FUNC_ATTRS, { args: ['qcuda_args_handle', { handle }], out: 'qcuda_out_func_attrs' });
const funcSet = (c: QcudaClient, func: bigint, attr: number, value: number) =>
  c.call(Cmd.FUNC_SET_ATTR, { args: ['qcuda_args_func_attr', { func, attr, value }] });
const occupancy = (c: QcudaClient, cmd: Cmd, o: { func?: bigint; blockSize?: number; smem?: bigint; flags?: number; numBlocks?: number }) =>
  c.call(cmd, {
    args: [
      'qcuda_args_occupancy',
      {
        func: o.func ?? 0x1234n,
        dynamic_smem: o.smem ?? 0n,
        block_size: o.blockSize ?? 128,
        flags: o.flags ?? 0,
        num_blocks: o.numBlocks ?? 1,
      },
    ],
  });
const limitSet = (c: QcudaClient, limit: number, value: bigint) => c.call(Cmd.LIMIT_SET, { args: ['qcuda_args_limit', { limit, value }] });
const limitGet = (c: QcudaClient, limit: number) => c.call(Cmd.LIMIT_GET, { args: ['qcuda_args_limit', { limit }] });

/** A cudaLaunchAttributeValue: fields written by f into 64 bytes. */
function attrValue(f: (v: DataView, b: Uint8Array) => void): Uint8Array {
  const b = new Uint8Array(QCUDA_ATTR_VALUE_BYTES);
  f(new DataView(b.buffer), b);
  return b;
}
const u32Value = (x: number) => attrValue((v) => v.setUint32(0, x >>> 0, true));
const window = (base: bigint, bytes: bigint, hitRatio: number, hitProp: number, missProp: number) =>
  attrValue((v) => {
    v.setBigUint64(0, base, true);
    v.setBigUint64(8, bytes, true);
    v.setFloat32(16, hitRatio, true);
    v.setUint32(20, hitProp, true);
    v.setUint32(24, missProp, true);
  });
const streamSet = (c: QcudaClient, stream: bigint, attr: number, value: Uint8Array) =>
  c.call(Cmd.STREAM_SET_ATTR, { args: ['qcuda_args_stream_attr', { stream, attr, value }] });
const streamGet = (c: QcudaClient, stream: bigint, attr: number) =>
  c.call(Cmd.STREAM_GET_ATTR, { args: ['qcuda_args_stream_attr', { stream, attr }], out: 'qcuda_out_stream_attr_value' });
const valueOf = (r: { out?: Record<string, unknown> }) => {
  const b = r.out!.value as Uint8Array;
  return { bytes: b, v: new DataView(b.buffer, b.byteOffset, b.length) };
};
const newStream = async (c: QcudaClient, priority = 0) =>
  (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority }] })).value;

// cudaStreamAttrID / cudaLimit numbers.
const APW = 1;
const SYNC_POLICY = 3;
const PRIORITY = 8;
const MEM_SYNC_MAP = 9;
const MEM_SYNC_DOMAIN = 10;
const NVLINK = 16;
const STACK = 0;
const FIFO = 1;
const HEAP = 2;
const SYNC_DEPTH = 3;
const PENDING = 4;
const L2_FETCH = 5;
const L2_PERSIST = 6;

// ---- function attributes, occupancy, cooperative launches

test('function attributes and occupancy: bad attribute ids and values are refused before the handle, bad handles after', async (t) => {
  const { c } = await setup(t);
  const stream = await newStream(c);
  t.is((await funcAttrs(c, 0x1234n)).status, CudaErr.InvalidResourceHandle, 'unknown function');
  t.is((await funcAttrs(c, stream)).status, CudaErr.InvalidResourceHandle, 'a stream is no function');
  t.is((await funcAttrs(c, 0n)).status, CudaErr.InvalidResourceHandle, 'function 0');
  t.is(
    (await c.call(Cmd.FUNC_ATTRS, { args: ['qcuda_args_handle', { handle: 0x1234n }] })).status,
    Status.BAD_REQUEST,
    'no room for func_attrs',
  );
  // cudaFuncSetAttribute: only cudaFuncAttribute 8..15, with CUDA's value ranges.
  for (const attr of [0, 4, 7, 16, 0xffffffff])
    t.is((await funcSet(c, 0x1234n, attr, 0)).status, CudaErr.InvalidValue, `attribute ${attr}`);
  t.is((await funcSet(c, 0x1234n, 8, -1)).status, CudaErr.InvalidValue, 'negative max dynamic shared memory');
  t.is((await funcSet(c, 0x1234n, 9, 101)).status, CudaErr.InvalidValue, 'carveout 101%');
  t.is((await funcSet(c, 0x1234n, 9, -2)).status, CudaErr.InvalidValue, 'carveout -2');
  t.is((await funcSet(c, 0x1234n, 11, -1)).status, CudaErr.InvalidValue, 'negative cluster width');
  t.is((await funcSet(c, 0x1234n, 15, 3)).status, CudaErr.InvalidValue, 'no such cluster scheduling policy');
  // Valid attribute and value: now the handle is looked at.
  t.is((await funcSet(c, 0x1234n, 8, 65536)).status, CudaErr.InvalidResourceHandle);
  t.is((await funcSet(c, 0x1234n, 9, -1)).status, CudaErr.InvalidResourceHandle, 'cudaSharedmemCarveoutDefault is a valid carveout');
  t.is((await funcSet(c, stream, 9, 50)).status, CudaErr.InvalidResourceHandle);
  // Occupancy.
  t.is((await occupancy(c, Cmd.OCCUPANCY_BLOCKS, { flags: 2 })).status, CudaErr.InvalidValue, 'unknown occupancy flag');
  t.is((await occupancy(c, Cmd.OCCUPANCY_BLOCKS, { blockSize: -32 })).status, CudaErr.InvalidValue, 'negative block size');
  t.is(
    (await occupancy(c, Cmd.OCCUPANCY_BLOCKS, { flags: 1 })).status,
    CudaErr.InvalidResourceHandle,
    'cudaOccupancyDisableCachingOverride is valid',
  );
  t.is((await occupancy(c, Cmd.OCCUPANCY_SMEM, { numBlocks: -1 })).status, CudaErr.InvalidValue, 'negative block count');
  t.is((await occupancy(c, Cmd.OCCUPANCY_SMEM, { blockSize: -1 })).status, CudaErr.InvalidValue);
  t.is((await occupancy(c, Cmd.OCCUPANCY_SMEM, {})).status, CudaErr.InvalidResourceHandle);
  t.is((await c.call(Cmd.OCCUPANCY_BLOCKS, { rawArgs: new Uint8Array(16) })).status, Status.BAD_REQUEST, 'short arguments');
});

test('cooperative launches are checked like launches', async (t) => {
  const { c, fe } = await setup(t);
  const stream = await newStream(c);
  const L = LAYOUT.qcuda_args_launch.size;
  const launch = (o: { func?: bigint; stream?: bigint; grid?: number[]; paramBytes?: number; extra?: number }) => {
    const a = encode('qcuda_args_launch', {
      func: o.func ?? 0x1234n,
      stream: o.stream ?? 0n,
      grid: new Uint32Array(o.grid ?? [1, 1, 1]),
      block: new Uint32Array([32, 1, 1]),
      shared_mem: 0,
      param_bytes: o.paramBytes ?? 0,
    });
    const raw = new Uint8Array(L + (o.extra ?? o.paramBytes ?? 0));
    raw.set(a);
    return c.call(Cmd.LAUNCH_COOPERATIVE, { rawArgs: raw });
  };
  t.is((await c.call(Cmd.LAUNCH_COOPERATIVE, { rawArgs: new Uint8Array(L - 8) })).status, Status.BAD_REQUEST, 'shorter than struct launch');
  t.is((await launch({ paramBytes: 16, extra: 8 })).status, Status.BAD_REQUEST, 'param_bytes says 16, 8 came');
  t.is((await launch({ paramBytes: QCUDA_MAX_ARGS, extra: QCUDA_MAX_ARGS })).status, Status.TOO_LARGE, 'over QCUDA_MAX_ARGS');
  t.is((await launch({})).status, CudaErr.InvalidResourceHandle, 'unknown function');
  t.is((await launch({ func: stream })).status, CudaErr.InvalidResourceHandle, 'a stream is no function');
  t.is((await launch({ func: 0n, grid: [0, 1, 1] })).status, CudaErr.InvalidResourceHandle, 'the function is checked first');
  const g = fe.mem.alloc(8);
  t.is(
    (await c.call(Cmd.LAUNCH_COOPERATIVE, { rawArgs: new Uint8Array(L), to: [{ gpa: g, len: 8 }] })).status,
    Status.BAD_REQUEST,
    'carries no data',
  );
});

// ---- limits

test('limits: CUDA 13 defaults per context, set and get, clamped hints, unsupported and unknown limits', async (t) => {
  const { c } = await setup(t);
  const get = async (limit: number) => {
    const r = await limitGet(c, limit);
    return r.status === 0 ? r.value : -BigInt(r.status);
  };
  t.is(await get(STACK), 1024n);
  t.is(await get(FIFO), MIB);
  t.is(await get(HEAP), 8n * MIB);
  t.is(await get(PENDING), 2048n);
  t.is(await get(L2_PERSIST), 0n);
  t.is(await get(SYNC_DEPTH), -BigInt(CudaErr.UnsupportedLimit), 'cudaLimitDevRuntimeSyncDepth: not on sm_90');
  t.is((await limitSet(c, SYNC_DEPTH, 4n)).status, CudaErr.UnsupportedLimit);
  for (const limit of [7, 8, 9, 100, 0xffffffff]) {
    // not a cudaLimit: cudaErrorInvalidValue (CUDA 13 on the H100)
    t.is((await limitGet(c, limit)).status, CudaErr.InvalidValue, `get limit ${limit}`);
    t.is((await limitSet(c, limit, 0n)).status, CudaErr.InvalidValue, `set limit ${limit}`);
  }
  t.is((await limitSet(c, STACK, 4096n)).status, 0);
  t.is(await get(STACK), 4096n);
  t.is((await limitSet(c, HEAP, 64n * MIB)).status, 0);
  t.is(await get(HEAP), 64n * MIB);
  t.is((await limitSet(c, FIFO, 2n * MIB)).status, 0);
  t.is(await get(FIFO), 2n * MIB);
  t.is((await limitSet(c, L2_FETCH, 1000n)).status, 0, 'a hint');
  t.is(await get(L2_FETCH), 128n, 'clamped to 128 bytes');
  t.is(
    (await limitSet(c, L2_PERSIST, MIB)).status,
    0,
    "the L2 set-aside is a hint kept for the guest: the GPU's is every VM's (review 2, L7)",
  );
  t.is(await get(L2_PERSIST), 0n, "no more than the device's maximum, 0 on the emu provider");
  // Per context: another session has the defaults; a reset brings them back.
  const other = new QcudaClient(c.fe);
  await other.open();
  const o = await limitGet(other, STACK);
  t.is(o.value, 1024n, 'another session: its own context');
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(await get(STACK), 1024n, 'cudaDeviceReset: a new context');
  t.is((await c.call(Cmd.LIMIT_GET, { rawArgs: new Uint8Array(8) })).status, Status.BAD_REQUEST, 'short arguments');
});

test('limits that reserve device memory stay within the VM quota', async (t) => {
  const { c } = await setup(t, 64n * MIB);
  t.is((await limitSet(c, HEAP, 128n * MIB)).status, CudaErr.MemoryAllocation, 'a heap larger than the quota');
  t.is(
    (await limitSet(c, FIFO, 66n * MIB)).status,
    CudaErr.MemoryAllocation,
    'a printf FIFO reserving more than the quota beyond its 1 MiB default',
  );
  t.is((await limitSet(c, HEAP, 32n * MIB)).status, 0);
  // The host device holds 1 x 2048 threads: 64 KiB each is 128 MiB.
  t.is((await limitSet(c, STACK, 64n * 1024n)).status, CudaErr.MemoryAllocation, 'a stack for every resident thread larger than the quota');
  t.is((await limitSet(c, STACK, 16n * 1024n)).status, 0);
  t.is((await limitSet(c, STACK, 1n << 62n)).status, CudaErr.MemoryAllocation, 'no overflow');
  t.is((await limitGet(c, STACK)).value, 16n * 1024n, 'refused values change nothing');
  t.is((await limitGet(c, HEAP)).value, 32n * MIB);
});

// ---- stream attributes

test('stream attributes: defaults, set and get per stream, the NULL and per-thread streams', async (t) => {
  const { c } = await setup(t);
  const s = await newStream(c, -2);
  t.is(valueOf(await streamGet(c, s, PRIORITY)).v.getInt32(0, true), -2, 'the creation priority');
  t.is(valueOf(await streamGet(c, s, SYNC_POLICY)).v.getUint32(0, true), 1, 'cudaSyncPolicyAuto');
  t.deepEqual([...valueOf(await streamGet(c, s, MEM_SYNC_MAP)).bytes.subarray(0, 2)], [0, 1], 'domain map: default 0, remote 1');
  t.is(valueOf(await streamGet(c, s, MEM_SYNC_DOMAIN)).v.getUint32(0, true), 0);
  t.is(valueOf(await streamGet(c, s, APW)).v.getBigUint64(8, true), 0n, 'no access policy window');
  t.is((await streamSet(c, s, SYNC_POLICY, u32Value(3))).status, 0, 'cudaSyncPolicyYield');
  t.is(valueOf(await streamGet(c, s, SYNC_POLICY)).v.getUint32(0, true), 3);
  t.is(
    (
      await streamSet(
        c,
        s,
        PRIORITY,
        attrValue((v) => v.setInt32(0, -1, true)),
      )
    ).status,
    0,
  );
  t.is(valueOf(await streamGet(c, s, PRIORITY)).v.getInt32(0, true), -1);
  t.is(
    (
      await streamSet(
        c,
        s,
        MEM_SYNC_MAP,
        attrValue((_v, b) => b.set([1, 0])),
      )
    ).status,
    0,
  );
  t.deepEqual([...valueOf(await streamGet(c, s, MEM_SYNC_MAP)).bytes.subarray(0, 2)], [1, 0]);
  t.is((await streamSet(c, s, NVLINK, u32Value(1))).status, 0);
  t.is(valueOf(await streamGet(c, s, NVLINK)).v.getUint32(0, true), 1);
  // Only the attribute's own fields are kept: garbage after them is dropped.
  const dirty = u32Value(1);
  dirty.fill(0xee, 4);
  t.is((await streamSet(c, s, MEM_SYNC_DOMAIN, dirty)).status, 0);
  const got = valueOf(await streamGet(c, s, MEM_SYNC_DOMAIN)).bytes;
  t.is(new DataView(got.buffer, got.byteOffset).getUint32(0, true), 1);
  t.true(
    got.subarray(4).every((x) => x === 0),
    'rebuilt from its fields',
  );
  // Another stream keeps its defaults; the NULL and per-thread streams have attributes too.
  const s2 = await newStream(c);
  t.is(valueOf(await streamGet(c, s2, SYNC_POLICY)).v.getUint32(0, true), 1);
  for (const special of [0n, 2n]) {
    t.is((await streamSet(c, special, SYNC_POLICY, u32Value(4))).status, 0, `stream ${special}`);
    t.is(valueOf(await streamGet(c, special, SYNC_POLICY)).v.getUint32(0, true), 4, `stream ${special}`);
  }
});

test('stream attributes: unknown streams, ids that are not stream attributes and out-of-range values are refused', async (t) => {
  const { c } = await setup(t);
  const s = await newStream(c);
  t.is((await streamGet(c, 0x9999n, PRIORITY)).status, CudaErr.InvalidResourceHandle, 'unknown stream');
  t.is((await streamSet(c, 0x9999n, PRIORITY, u32Value(0))).status, CudaErr.InvalidResourceHandle);
  t.is((await streamGet(c, 1n, PRIORITY)).status, CudaErr.InvalidResourceHandle, 'handle 1 (cudaStreamLegacy is 0 on the wire)');
  const other = new QcudaClient(c.fe);
  await other.open();
  t.is((await streamGet(other, s, PRIORITY)).status, CudaErr.InvalidResourceHandle, "another session's stream");
  t.is((await streamSet(other, s, SYNC_POLICY, u32Value(2))).status, CudaErr.InvalidResourceHandle);
  t.is(valueOf(await streamGet(c, s, SYNC_POLICY)).v.getUint32(0, true), 1, 'unchanged');
  for (const attr of [0, 2, 4, 5, 6, 7, 11, 12, 13, 14, 15, 17, 999, 0xffffffff]) {
    t.is((await streamGet(c, s, attr)).status, CudaErr.InvalidValue, `get attribute ${attr}`);
    t.is((await streamSet(c, s, attr, u32Value(1))).status, CudaErr.InvalidValue, `set attribute ${attr}`);
  }
  for (const p of [0, 5, 0xffffffff])
    t.is((await streamSet(c, s, SYNC_POLICY, u32Value(p))).status, CudaErr.InvalidValue, `sync policy ${p}`);
  t.is((await streamSet(c, s, MEM_SYNC_DOMAIN, u32Value(2))).status, CudaErr.InvalidValue, 'memory sync domain 2');
  t.is((await streamSet(c, s, NVLINK, u32Value(2))).status, CudaErr.InvalidValue);
  t.is(
    (await c.call(Cmd.STREAM_GET_ATTR, { args: ['qcuda_args_stream_attr', { stream: s, attr: PRIORITY }] })).status,
    Status.BAD_REQUEST,
    'no room for the value',
  );
  t.is(
    (await c.call(Cmd.STREAM_SET_ATTR, { rawArgs: new Uint8Array(LAYOUT.qcuda_args_stream_attr.size - 8) })).status,
    Status.BAD_REQUEST,
    'short arguments',
  );
});

test("stream access policy windows must lie in the session's memory, with CUDA's hit ratios and properties", async (t) => {
  const { c } = await setup(t);
  const s = await newStream(c);
  const a = (await c.malloc(1 << 20)).value;
  const set = (w: Uint8Array) => streamSet(c, s, APW, w);
  t.is(
    (await set(window(a, 1n << 20n, 0.6, 2, 1))).status,
    0,
    'the whole allocation, persisting hits (made Normal: review 2, L7), streaming misses',
  );
  const { v } = valueOf(await streamGet(c, s, APW));
  t.is(v.getBigUint64(0, true), a);
  t.is(v.getBigUint64(8, true), 1n << 20n);
  t.is(v.getFloat32(16, true), Math.fround(0.6));
  t.deepEqual([v.getUint32(20, true), v.getUint32(24, true)], [0, 1]);
  t.is((await set(window(a + 4096n, 4096n, 1, 0, 0))).status, 0, 'inside the allocation');
  t.is((await set(window(0x1234n, 0n, 0, 0, 0))).status, 0, 'no window (0 bytes): any base');
  t.is((await set(window(a, (1n << 20n) + 1n, 0.5, 2, 0))).status, CudaErr.InvalidValue, 'one byte past the allocation');
  t.is((await set(window(0x1234n, 4096n, 0.5, 2, 0))).status, CudaErr.InvalidValue, 'not memory of this session');
  const other = new QcudaClient(c.fe);
  await other.open();
  const os = await newStream(other);
  t.is((await streamSet(other, os, APW, window(a, 4096n, 0.5, 2, 0))).status, CudaErr.InvalidValue, "another session's allocation");
  t.is((await set(window(a, 4096n, 1.5, 2, 0))).status, CudaErr.InvalidValue, 'hit ratio above 1');
  t.is((await set(window(a, 4096n, -0.1, 2, 0))).status, CudaErr.InvalidValue, 'negative hit ratio');
  t.is((await set(window(a, 4096n, NaN, 2, 0))).status, CudaErr.InvalidValue, 'NaN hit ratio');
  t.is((await set(window(a, 4096n, 0.5, 3, 0))).status, CudaErr.InvalidValue, 'hitProp 3');
  t.is((await set(window(a, 4096n, 0.5, 2, 2))).status, CudaErr.InvalidValue, 'missProp persisting');
  t.is((await c.free(a)).status, 0);
  t.is((await set(window(a, 4096n, 0.5, 2, 0))).status, CudaErr.InvalidValue, 'freed memory');
});

test("cluster occupancy and tensor maps: the backend refuses what would overrun the driver's arrays, the emu provider says what it lacks", async (t) => {
  const { c } = await setup(t);
  const clusters = (query: number) =>
    c.call(Cmd.OCCUPANCY_CLUSTERS, {
      rawArgs: encode('qcuda_args_cluster_occupancy', {
        func: 0x1234n,
        grid: new Uint32Array([64, 1, 1]),
        block: new Uint32Array([128, 1, 1]),
        cluster: new Uint32Array([2, 1, 1]),
        query,
      }),
    });
  t.is((await clusters(2)).status, CudaErr.InvalidValue, 'a query that is neither clusters nor cluster size');
  t.is((await clusters(0)).status, CudaErr.InvalidResourceHandle, 'no such function');
  t.is((await clusters(1)).status, CudaErr.InvalidResourceHandle);

  const map = (kind: number, rank: number) =>
    c.call(Cmd.TENSOR_MAP_ENCODE, {
      rawArgs: encode('qcuda_args_tensor_map', {
        kind,
        rank,
        data_type: 6,
        global_address: 0x10000n,
        global_dim: new BigUint64Array([64n, 64n, 1n, 1n, 1n]),
      }),
      out: 'qcuda_out_tensor_map',
    });
  for (const [kind, rank, why] of [
    [0, 0, 'tiled rank 0'],
    [0, 6, 'tiled rank 6: past the arrays'],
    [1, 2, 'im2col rank 2'],
    [1, 6, 'im2col rank 6'],
    [2, 9, 'im2col wide rank 9'],
    [4, 2, 'no such encoder'],
  ] as const)
    t.is((await map(kind, rank)).status, CudaErr.InvalidValue, why);
  // A rank that fits reaches the provider: the emu provider has no tensor memory accelerator.
  for (const [kind, rank] of [
    [0, 1],
    [0, 5],
    [1, 3],
    [2, 5],
    [3, 0],
  ] as const)
    t.is((await map(kind, rank)).status, CudaErr.NotSupported, `kind ${kind} rank ${rank}`);
  t.is((await c.call(Cmd.TENSOR_MAP_ENCODE, { rawArgs: new Uint8Array(64) })).status, Status.BAD_REQUEST, 'short arguments');
});
