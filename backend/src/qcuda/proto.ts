// The virtio-qcuda wire protocol, mirrored from guest-driver/include/qcuda_proto.h
// (the one source of truth; test/qcuda/proto.test.ts compiles the header and
// checks every id, size and offset here against it). Each struct is a field
// list; offsets follow C's natural alignment, as the header's explicit
// padding makes them.

export const VIRTIO_ID_QCUDA = 60;
export const QCUDA_MAGIC = 0x44554351;
export const QCUDA_PROTO_VERSION = 3;
export const QCUDA_CONFIG_SIZE = 40;
export const QCUDA_CAP_GPU = 1n << 0n;
export const QCUDA_MAX_ARGS = 4096;
export const QCUDA_MAX_OUT = 4096;
export const QCUDA_CHUNK = 16 << 20;
export const QCUDA_NUM_ATTRS = 160;
export const QCUDA_STREAM_LEGACY = 0n;
export const QCUDA_STREAM_PER_THREAD = 2n;
export const QCUDA_MAX_MODULE = 64 << 20;
export const QCUDA_MAX_PARAMS = 256;
export const QCUDA_MAX_PARAM_BYTES = 4000;
export const QCUDA_MAX_NAME = 256;
export const QCUDA_NUM_FUNC_ATTRS = 16;
export const QCUDA_ATTR_VALUE_BYTES = 64;
export const QCUDA_MAX_BATCH = 64 << 10;

export enum Cmd {
  NOP = 0,
  SESSION_OPEN = 1,
  SESSION_CLOSE = 2,
  HELLO = 16,
  DEVICE_PROPS = 17,
  SET_DEVICE = 18,
  DEVICE_SYNC = 19,
  DEVICE_RESET = 20,
  MEM_GET_INFO = 21,
  MALLOC = 22,
  FREE = 23,
  MEMCPY_HTOD = 24,
  MEMCPY_DTOH = 25,
  MEMCPY_DTOD = 26,
  MEMSET = 27,
  HOST_MAP = 28,
  HOST_UNMAP = 29,
  STREAM_CREATE = 32,
  STREAM_DESTROY = 33,
  STREAM_SYNC = 34,
  STREAM_QUERY = 35,
  STREAM_WAIT_EVENT = 36,
  EVENT_CREATE = 40,
  EVENT_DESTROY = 41,
  EVENT_RECORD = 42,
  EVENT_SYNC = 43,
  EVENT_QUERY = 44,
  EVENT_ELAPSED = 45,
  MODULE_UPLOAD = 48,
  MODULE_LOAD = 49,
  MODULE_UNLOAD = 50,
  FUNC_GET = 51,
  VAR_GET = 52,
  LAUNCH = 53,
  FUNC_ATTRS = 60,
  FUNC_SET_ATTR = 61,
  OCCUPANCY_BLOCKS = 62,
  OCCUPANCY_SMEM = 63,
  LIMIT_SET = 64,
  LIMIT_GET = 65,
  STREAM_SET_ATTR = 66,
  STREAM_GET_ATTR = 67,
  LAUNCH_COOPERATIVE = 68,
  OUTPUT_READ = 56,
  BATCH = 54,
  HOST_FUNC = 55,
  CALLBACK_WAIT = 70,
}

/** Not a status: OR-ed into the status of any reply to a session with device output waiting. */
export const QCUDA_ST_OUTPUT = 0x40000000;
/** OUTPUT_READ kinds: device printf (the program's stdout), failed asserts (its stderr). */
export const QCUDA_OUTPUT_STDOUT = 1;
export const QCUDA_OUTPUT_STDERR = 2;

export enum Status {
  OK = 0,
  BAD_REQUEST = 0x10000,
  UNKNOWN_CMD = 0x10001,
  TOO_LARGE = 0x10002,
  VERSION = 0x10003,
  NO_SESSION = 0x10004,
}

type FieldType = 'u32' | 'i32' | 'u64' | `u8[${number}]` | `char[${number}]` | `u32[${number}]` | `u64[${number}]`;
type Fields = readonly (readonly [string, FieldType])[];

/** Every struct of the header, by its C name without the "struct ". */
export const STRUCTS = {
  virtio_qcuda_config: [['magic', 'u32'], ['proto_version', 'u32'], ['num_queues', 'u32'], ['queue_size', 'u32'], ['capabilities', 'u64'], ['reserved', 'u64[2]']],
  qcuda_req_hdr: [['cmd', 'u32'], ['len', 'u32'], ['session', 'u64'], ['data_offset', 'u64'], ['data_len', 'u64']],
  qcuda_resp_hdr: [['status', 'u32'], ['len', 'u32'], ['value', 'u64']],
  qcuda_args_hello: [['proto_version', 'u32'], ['cuda_version', 'u32']],
  qcuda_out_hello: [['proto_version', 'u32'], ['driver_version', 'u32'], ['device_count', 'u32'], ['reserved', 'u32'], ['capabilities', 'u64'], ['memory_limit', 'u64']],
  qcuda_args_device: [['device', 'u32'], ['reserved', 'u32']],
  qcuda_out_device_props: [['name', 'char[256]'], ['uuid', 'u8[16]'], ['total_mem', 'u64'], ['attrs', `u32[${QCUDA_NUM_ATTRS}]`]],
  qcuda_out_mem_info: [['free', 'u64'], ['total', 'u64']],
  qcuda_args_malloc: [['size', 'u64']],
  qcuda_args_ptr: [['ptr', 'u64']],
  qcuda_args_handle: [['handle', 'u64']],
  qcuda_args_memcpy: [['dst', 'u64'], ['src', 'u64'], ['size', 'u64'], ['stream', 'u64'], ['async', 'u32'], ['reserved', 'u32']],
  qcuda_args_memset: [['dst', 'u64'], ['size', 'u64'], ['stream', 'u64'], ['value', 'u32'], ['async', 'u32']],
  qcuda_args_host_map: [['gpa', 'u64'], ['size', 'u64']],
  qcuda_args_stream_create: [['flags', 'u32'], ['priority', 'i32']],
  qcuda_args_stream_wait_event: [['stream', 'u64'], ['event', 'u64'], ['flags', 'u32'], ['reserved', 'u32']],
  qcuda_args_event_create: [['flags', 'u32'], ['reserved', 'u32']],
  qcuda_args_event_record: [['event', 'u64'], ['stream', 'u64']],
  qcuda_args_event_elapsed: [['start', 'u64'], ['end', 'u64']],
  qcuda_out_event_elapsed: [['ms_bits', 'u32'], ['reserved', 'u32']],
  qcuda_args_module_upload: [['upload_id', 'u64'], ['size', 'u64']],
  qcuda_args_module_load: [['upload_id', 'u64']],
  qcuda_args_symbol: [['module', 'u64'], ['name', 'char[256]']],
  qcuda_out_func_info: [['num_params', 'u32'], ['param_bytes', 'u32'], ['offset', 'u32[256]'], ['size', 'u32[256]']],
  qcuda_out_var_info: [['dptr', 'u64'], ['size', 'u64']],
  qcuda_args_launch: [['func', 'u64'], ['stream', 'u64'], ['grid', 'u32[3]'], ['block', 'u32[3]'], ['shared_mem', 'u32'], ['param_bytes', 'u32']],
  qcuda_out_func_attrs: [['values', 'u32[16]']],
  qcuda_args_func_attr: [['func', 'u64'], ['attr', 'u32'], ['value', 'i32']],
  qcuda_args_occupancy: [['func', 'u64'], ['dynamic_smem', 'u64'], ['block_size', 'i32'], ['flags', 'u32'], ['num_blocks', 'i32'], ['reserved', 'u32']],
  qcuda_args_limit: [['limit', 'u32'], ['reserved', 'u32'], ['value', 'u64']],
  qcuda_args_stream_attr: [['stream', 'u64'], ['attr', 'u32'], ['reserved', 'u32'], ['value', 'u8[64]']],
  qcuda_out_stream_attr_value: [['value', 'u8[64]']],
  qcuda_args_host_func: [['stream', 'u64'], ['id', 'u64']],
  qcuda_args_callback_wait: [['done', 'u64']],
  qcuda_out_callback: [['id', 'u64'], ['status', 'u32'], ['reserved', 'u32']],
  qcuda_args_batch: [['count', 'u32'], ['reserved', 'u32'], ['bytes', 'u64']],
  qcuda_batch_entry: [['cmd', 'u32'], ['len', 'u32']],
  qcuda_out_output_read: [['kind', 'u32'], ['more', 'u32']],
} as const satisfies Record<string, Fields>;

export type StructName = keyof typeof STRUCTS;

interface Field {
  name: string;
  kind: 'u32' | 'i32' | 'u64' | 'bytes' | 'u32[]' | 'u64[]';
  offset: number;
  size: number;
  count: number;
}

export interface Layout {
  size: number;
  fields: Field[];
  offsets: Record<string, number>;
}

function parseType(t: FieldType): { kind: Field['kind']; elem: number; count: number } {
  const m = /^(\w+)\[(\d+)\]$/.exec(t);
  if (!m) return t === 'u64' ? { kind: 'u64', elem: 8, count: 1 } : { kind: t as 'u32' | 'i32', elem: 4, count: 1 };
  const count = Number(m[2]);
  if (m[1] === 'u32') return { kind: 'u32[]', elem: 4, count };
  if (m[1] === 'u64') return { kind: 'u64[]', elem: 8, count };
  return { kind: 'bytes', elem: 1, count };
}

function computeLayout(fields: Fields): Layout {
  let at = 0;
  let align = 1;
  const out: Field[] = [];
  for (const [name, type] of fields) {
    const { kind, elem, count } = parseType(type);
    at = Math.ceil(at / elem) * elem;
    align = Math.max(align, elem);
    out.push({ name, kind, offset: at, size: elem * count, count });
    at += elem * count;
  }
  const size = Math.ceil(at / align) * align;
  return { size, fields: out, offsets: Object.fromEntries(out.map((f) => [f.name, f.offset])) };
}

export const LAYOUT = Object.fromEntries(
  Object.entries(STRUCTS).map(([k, v]) => [k, computeLayout(v)]),
) as Record<StructName, Layout>;

export type Value = number | bigint | Uint8Array | Uint32Array | BigUint64Array;
export type Decoded = Record<string, Value>;

export function decode(name: StructName, bytes: Uint8Array): Decoded {
  const l = LAYOUT[name];
  if (bytes.length < l.size) throw new RangeError(`${name}: ${bytes.length} bytes, needs ${l.size}`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, l.size);
  const out: Decoded = {};
  for (const f of l.fields) {
    switch (f.kind) {
      case 'u32': out[f.name] = v.getUint32(f.offset, true); break;
      case 'i32': out[f.name] = v.getInt32(f.offset, true); break;
      case 'u64': out[f.name] = v.getBigUint64(f.offset, true); break;
      default: out[f.name] = bytes.slice(f.offset, f.offset + f.size); break;
    }
  }
  return out;
}

export function encode(name: StructName, values: Record<string, Value | string | undefined>): Uint8Array {
  const l = LAYOUT[name];
  const bytes = new Uint8Array(l.size);
  const v = new DataView(bytes.buffer);
  for (const f of l.fields) {
    const x = values[f.name];
    if (x === undefined) continue;
    switch (f.kind) {
      case 'u32': v.setUint32(f.offset, Number(x) >>> 0, true); break;
      case 'i32': v.setInt32(f.offset, Number(x), true); break;
      case 'u64': v.setBigUint64(f.offset, BigInt(x as number | bigint), true); break;
      case 'u32[]': (x as Uint32Array).forEach((e, i) => i < f.count && v.setUint32(f.offset + i * 4, e, true)); break;
      case 'u64[]': (x as BigUint64Array).forEach((e, i) => i < f.count && v.setBigUint64(f.offset + i * 8, e, true)); break;
      case 'bytes': {
        const b = typeof x === 'string' ? Buffer.from(x) : (x as Uint8Array);
        bytes.set(b.subarray(0, f.count - (typeof x === 'string' ? 1 : 0)), f.offset); // strings stay NUL-terminated
        break;
      }
    }
  }
  return bytes;
}
