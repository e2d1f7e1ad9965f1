// The virtio-qcuda wire protocol as the backend uses it, all derived from
// its one declaration (wire/protocol.ts): constants, command numbers,
// statuses, struct layouts and typed encode/decode.
import { decodeStruct, encodeStruct, layoutOf, type FieldInput, type Fields, type Layout } from './wire/layout';
import { CALLS, CONSTANTS, STATUSES, STRUCTS, type CmdName, type StructName } from './wire/protocol';

export { CALLS, STRUCTS, type CmdName, type StructName };

export const VIRTIO_ID_QCUDA = CONSTANTS.VIRTIO_ID_QCUDA.value;
export const QCUDA_MAGIC = CONSTANTS.QCUDA_MAGIC.value;
export const QCUDA_PROTO_VERSION = CONSTANTS.QCUDA_PROTO_VERSION.value;
export const QCUDA_CONFIG_SIZE = CONSTANTS.QCUDA_CONFIG_SIZE.value;
export const QCUDA_CAP_GPU = CONSTANTS.QCUDA_CAP_GPU.value;
export const QCUDA_MAX_ARGS = CONSTANTS.QCUDA_MAX_ARGS.value;
export const QCUDA_MAX_OUT = CONSTANTS.QCUDA_MAX_OUT.value;
export const QCUDA_CHUNK = CONSTANTS.QCUDA_CHUNK.value;
export const QCUDA_ST_OUTPUT = CONSTANTS.QCUDA_ST_OUTPUT.value;
export const QCUDA_SESSION_OWN_QUEUE = CONSTANTS.QCUDA_SESSION_OWN_QUEUE.value;
export const QCUDA_LAUNCH_COOPERATIVE = CONSTANTS.QCUDA_LAUNCH_COOPERATIVE.value;
export const QCUDA_MAX_CLUSTER_BLOCKS = CONSTANTS.QCUDA_MAX_CLUSTER_BLOCKS.value;
export const QCUDA_STREAM_LEGACY = CONSTANTS.QCUDA_STREAM_LEGACY.value;
export const QCUDA_STREAM_PER_THREAD = CONSTANTS.QCUDA_STREAM_PER_THREAD.value;
export const QCUDA_NUM_ATTRS = CONSTANTS.QCUDA_NUM_ATTRS.value;
export const QCUDA_MAX_MODULE = CONSTANTS.QCUDA_MAX_MODULE.value;
export const QCUDA_MAX_PARAMS = CONSTANTS.QCUDA_MAX_PARAMS.value;
export const QCUDA_MAX_LINK_INPUTS = CONSTANTS.QCUDA_MAX_LINK_INPUTS.value;
export const QCUDA_MAX_LINK_OPTIONS = CONSTANTS.QCUDA_MAX_LINK_OPTIONS.value;
export const QCUDA_LINK_NAME = CONSTANTS.QCUDA_LINK_NAME.value;
export const QCUDA_MAX_PARAM_BYTES = CONSTANTS.QCUDA_MAX_PARAM_BYTES.value;
export const QCUDA_MAX_NAME = CONSTANTS.QCUDA_MAX_NAME.value;
export const QCUDA_NUM_FUNC_ATTRS = CONSTANTS.QCUDA_NUM_FUNC_ATTRS.value;
export const QCUDA_ATTR_VALUE_BYTES = CONSTANTS.QCUDA_ATTR_VALUE_BYTES.value;
export const QCUDA_MAX_BATCH = CONSTANTS.QCUDA_MAX_BATCH.value;
export const QCUDA_BATCH_ENDS_SYNC = CONSTANTS.QCUDA_BATCH_ENDS_SYNC.value;
export const QCUDA_BATCH_ENDS_QUERY = CONSTANTS.QCUDA_BATCH_ENDS_QUERY.value;
export const QCUDA_MAX_EXTENTS = CONSTANTS.QCUDA_MAX_EXTENTS.value;
export const QCUDA_OUTPUT_STDOUT = CONSTANTS.QCUDA_OUTPUT_STDOUT.value;
export const QCUDA_OUTPUT_STDERR = CONSTANTS.QCUDA_OUTPUT_STDERR.value;
export const QCUDA_MEM_LINEAR = CONSTANTS.QCUDA_MEM_LINEAR.value;
export const QCUDA_MEM_ARRAY = CONSTANTS.QCUDA_MEM_ARRAY.value;
export const QCUDA_MEM_HOST = CONSTANTS.QCUDA_MEM_HOST.value;
export const QCUDA_GNODE_KERNEL = CONSTANTS.QCUDA_GNODE_KERNEL.value;
export const QCUDA_GNODE_MEMCPY = CONSTANTS.QCUDA_GNODE_MEMCPY.value;
export const QCUDA_GNODE_MEMSET = CONSTANTS.QCUDA_GNODE_MEMSET.value;
export const QCUDA_GNODE_EMPTY = CONSTANTS.QCUDA_GNODE_EMPTY.value;
export const QCUDA_GNODE_EVENT_RECORD = CONSTANTS.QCUDA_GNODE_EVENT_RECORD.value;
export const QCUDA_GNODE_EVENT_WAIT = CONSTANTS.QCUDA_GNODE_EVENT_WAIT.value;
export const QCUDA_GNODE_COND = CONSTANTS.QCUDA_GNODE_COND.value;
export const QCUDA_GRAPH_TOP = CONSTANTS.QCUDA_GRAPH_TOP.value;
export const QCUDA_MAX_GRAPH_NODES = CONSTANTS.QCUDA_MAX_GRAPH_NODES.value;
export const QCUDA_VMM_GRANULARITY = CONSTANTS.QCUDA_VMM_GRANULARITY.value;
export const QCUDA_VMM_ACCESS_RW = CONSTANTS.QCUDA_VMM_ACCESS_RW.value;

/** Command numbers by name (Cmd.MALLOC === 22). */
export const Cmd = Object.fromEntries(Object.entries(CALLS).map(([k, v]) => [k, v.cmd])) as {
  readonly [K in CmdName]: (typeof CALLS)[K]['cmd'];
};
export type Cmd = (typeof Cmd)[CmdName];

const NAMES = new Map<number, CmdName>(Object.entries(CALLS).map(([k, v]) => [v.cmd, k as CmdName]));

/** A command number as log lines show it: its name, or the number. */
export function cmdName(n: number): string {
  return NAMES.get(n) ?? String(n);
}

export const Status = Object.fromEntries(Object.entries(STATUSES).map(([k, v]) => [k, v.value])) as {
  readonly [K in keyof typeof STATUSES]: (typeof STATUSES)[K]['value'];
};
export type Status = (typeof Status)[keyof typeof Status];

export const LAYOUT = Object.fromEntries(Object.entries(STRUCTS).map(([k, v]) => [k, layoutOf(v)])) as Record<StructName, Layout>;

/** A struct's fields, typed by its declaration. */
export type Decoded<S extends StructName> = Fields<(typeof STRUCTS)[S]>;

export function decode<S extends StructName>(name: S, bytes: Uint8Array): Decoded<S> {
  return decodeStruct<(typeof STRUCTS)[S]>(name, LAYOUT[name], bytes);
}

export function encode<S extends StructName>(name: S, values: FieldInput<(typeof STRUCTS)[S]>): Uint8Array {
  return encodeStruct<(typeof STRUCTS)[S]>(LAYOUT[name], values);
}
