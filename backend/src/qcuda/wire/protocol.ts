// The virtio-qcuda wire protocol, declared once. Everything else is derived
// from this file: the C header the guest kernel driver and library include
// (guest-driver/include/qcuda_proto.h), the guest library's request builders
// (guest-driver/lib/qc_calls.h), both written by `npm run gen` and checked
// current by test/tools/generated.test.ts; the backend's typed decoders
// (proto.ts), the command table's shape checks (commands/), and the provider
// context's methods for the calls a context answers (provider.ts).
//
// A call declares its command number, argument and output structs, the data
// it moves, the handles it takes, whether it may be posted (sent later in a
// BATCH), whether it reports posted work's errors, and which side answers
// it. Structs list their fields in order; the C header gives each the
// natural alignment and explicit padding (every struct's size is a multiple
// of 8), so offsets computed here (layout.ts) are C's.
import type { StructDecl } from './layout';

// ---- constants (name: value, C suffix, comment)

export interface ConstantDecl {
  readonly value: number | bigint;
  /** How C writes it when it is not the plain decimal value. */
  readonly c?: string;
  readonly doc?: string;
}

export const CONSTANTS = {
  VIRTIO_ID_QCUDA: {
    value: 60,
    doc: "Virtio device id. 60 is unassigned in virtio 1.3 and the current draft (assigned: 1-13, 16-36, 38-49) and keeps the modern PCI id 0x1040 + 60 = 0x107c below Linux's 0x107f limit. To be replaced by an id reserved with the virtio TC.",
  },
  QCUDA_MAGIC: { value: 0x44554351, c: '0x44554351u', doc: '"QCUD"' },
  QCUDA_PROTO_VERSION: {
    value: 5,
    c: '5u',
    doc: 'Bumped on any incompatible change of this file (new commands and structs are compatible).',
  },
  QCUDA_CONFIG_SIZE: { value: 40, doc: 'sizeof(struct virtio_qcuda_config)' },
  QCUDA_CAP_GPU: { value: 1n, c: '(1ull << 0)', doc: 'a real GPU serves this device' },
  QCUDA_MAX_ARGS: {
    value: 32832,
    doc: "Largest argument block of any command: a launch's struct qcuda_args_launch_ex (64 bytes) and QCUDA_MAX_PARAM_BYTES of parameters, rounded up to 64.",
  },
  QCUDA_MAX_OUT: { value: 4096, doc: 'Largest output block of any command.' },
  QCUDA_CHUNK: {
    value: 16 << 20,
    c: '(16u << 20)',
    doc: "The driver splits transfers into chunks of at most this many bytes. The backend takes data chunks of any size (it bounds only OUTPUT_READ, a single chunk, by this). Large, since each request costs the backend time on the GPU (~12 us); a chunk of scattered pages is a chain of up to 4097 data descriptors + 4, which the backend's indirect tables must admit.",
  },
  QCUDA_ST_OUTPUT: {
    value: 0x40000000,
    c: '0x40000000u',
    doc: 'Not a status: a flag OR-ed into resp.status of any reply to a session with device output waiting ("fetch it with OUTPUT_READ"); the rest of the status is the command\'s own. Statuses stay below it.',
  },
  QCUDA_LAUNCH_COOPERATIVE: {
    value: 1,
    c: '1u',
    doc: 'LAUNCH_EX flags: every block of the grid resident at once (the cooperative launch attribute)',
  },
  QCUDA_SESSION_OWN_QUEUE: {
    value: 1,
    c: '1u',
    doc: "SESSION_OPEN flags: every request of the session, its SESSION_CLOSE included, comes on the queue this SESSION_OPEN came on (not queue 0), and no other session's does until that close; the backend may then hand the queue to the session's worker, which serves it with no hop through the backend",
  },
  QCUDA_STREAM_LEGACY: { value: 0n, c: '0ull', doc: 'the NULL stream (stream handles with a meaning of their own, as in CUDA)' },
  QCUDA_STREAM_PER_THREAD: { value: 2n, c: '2ull', doc: 'cudaStreamPerThread' },
  QCUDA_NUM_ATTRS: { value: 160, doc: 'Device attributes are indexed by CUdevice_attribute (== cudaDeviceAttr).' },
  QCUDA_MAX_MODULE: { value: 64 << 20, c: '(64u << 20)', doc: 'Largest fat binary the backend accepts.' },
  QCUDA_MAX_PARAMS: { value: 256, doc: 'Most kernel parameters.' },
  QCUDA_MAX_LINK_INPUTS: {
    value: 4,
    doc: 'LINK: most inputs of one link (each a finished module upload: at most this many are pending at once).',
  },
  QCUDA_MAX_LINK_OPTIONS: { value: 8, doc: "LINK: most JIT options (CUjit_option, integer value) passed to the host's linker." },
  QCUDA_LINK_NAME: { value: 256, doc: "LINK: bytes of each input's name, with its NUL (a longer name is cut)." },
  QCUDA_MAX_PARAM_BYTES: { value: 32764, doc: "A kernel's parameters: CUDA 12.1+'s limit on Volta and later." },
  QCUDA_MAX_NAME: {
    value: 4088,
    doc: "A kernel or variable name with its NUL (PyTorch's templated kernels have names of over 256 bytes).",
  },
  QCUDA_NUM_FUNC_ATTRS: {
    value: 16,
    doc: 'FUNC_ATTRS: every CUfunction_attribute (cuFuncGetAttribute), indexed by it (CU_FUNC_ATTRIBUTE_MAX in CUDA 13); each an int, as its bits.',
  },
  QCUDA_ATTR_VALUE_BYTES: {
    value: 64,
    doc: "A stream attribute's value: cudaLaunchAttributeValue / CUstreamAttrValue, the same 64-byte union in both APIs.",
  },
  QCUDA_MAX_BATCH: { value: 64 << 10, c: '(64u << 10)', doc: 'A batch carries at most this many bytes of entries.' },
  QCUDA_BATCH_ENDS_SYNC: {
    value: 1,
    c: '1u',
    doc: "qcuda_args_batch.flags: the batch's last entry is a synchronizing command (one declared to report posted work's errors: DEVICE_SYNC, STREAM_SYNC, EVENT_SYNC), run after the others, so that posted work and the call that waits for it take one round trip. The reply is that command's (a failure of the other entries is posted work's error, which it reports).",
  },
  QCUDA_MAX_EXTENTS: {
    value: 2048,
    doc: "HOST_MAP_PAGES: extents at most (what fits in QCUDA_MAX_ARGS); 8 GiB of the guest kernel's 4 MiB blocks.",
  },
  QCUDA_OUTPUT_STDOUT: { value: 1, c: '1u', doc: "OUTPUT_READ kinds: device printf, for the program's stdout" },
  QCUDA_MEM_LINEAR: { value: 0, c: '0u', doc: 'MEMCPY_3D sides: linear device memory' },
  QCUDA_MEM_ARRAY: { value: 1, c: '1u', doc: 'a CUDA array of the session (ARRAY_CREATE)' },
  QCUDA_GNODE_KERNEL: { value: 1, c: '1u', doc: 'GRAPH_INSTANTIATE node types: a kernel (handle: the function; params at param_off)' },
  QCUDA_GNODE_MEMCPY: { value: 2, c: '2u', doc: 'a copy of width x height x depth between device ranges (dst/src with pitch and rows)' },
  QCUDA_GNODE_MEMSET: { value: 3, c: '3u', doc: 'width elements of elem bytes x height rows, pitch apart, set to value' },
  QCUDA_GNODE_EMPTY: { value: 4, c: '4u', doc: 'nothing (an ordering point)' },
  QCUDA_GNODE_EVENT_RECORD: { value: 5, c: '5u', doc: 'records event handle' },
  QCUDA_GNODE_EVENT_WAIT: { value: 6, c: '6u', doc: 'waits for event handle' },
  QCUDA_GNODE_COND: {
    value: 7,
    c: '7u',
    doc: 'a conditional node: cond_type (cudaGraphCondType), size bodies, handle from GRAPH_COND_HANDLE',
  },
  QCUDA_GRAPH_TOP: {
    value: 0xffffffff,
    c: '0xffffffffu',
    doc: "a node's parent when it is in the graph itself, not in a conditional node's body",
  },
  QCUDA_MAX_GRAPH_NODES: { value: 16384, doc: 'GRAPH_INSTANTIATE: nodes at most (bodies included), and as many edges' },
  QCUDA_MEM_HOST: { value: 2, c: '2u', doc: "the request's data (guest memory)" },
  QCUDA_OUTPUT_STDERR: { value: 2, c: '2u', doc: "failed device asserts and qcuda's notes of dropped output, for its stderr" },
  QCUDA_VMM_GRANULARITY: {
    value: 2 << 20,
    c: '(2u << 20)',
    doc: "Virtual memory management (VMM_*): the granularity of reservations, physical allocations and mappings (cuMemGetAllocationGranularity, minimum and recommended), as the H100's and H200's driver reports it",
  },
  QCUDA_VMM_ACCESS_RW: {
    value: 3,
    c: '3u',
    doc: 'VMM_SET_ACCESS / VMM_GET_ACCESS: CU_MEM_ACCESS_FLAGS_PROT_READWRITE, the one access a mapping may be given',
  },
} as const satisfies Record<string, ConstantDecl>;

/** Statuses besides cudaError_t values (which pass through unchanged). */
export const STATUSES = {
  OK: { value: 0 },
  BAD_REQUEST: { value: 0x10000, doc: 'above every cudaError_t' },
  UNKNOWN_CMD: { value: 0x10001 },
  TOO_LARGE: { value: 0x10002 },
  VERSION: { value: 0x10003, doc: 'the guest library speaks another version' },
  NO_SESSION: { value: 0x10004, doc: 'unknown or missing session id' },
} as const;

// ---- structs (by their C name without "struct ")

const NUM_ATTRS = CONSTANTS.QCUDA_NUM_ATTRS.value;
const MAX_PARAMS = CONSTANTS.QCUDA_MAX_PARAMS.value;
const NUM_FUNC_ATTRS = CONSTANTS.QCUDA_NUM_FUNC_ATTRS.value;
const ATTR_VALUE_BYTES = CONSTANTS.QCUDA_ATTR_VALUE_BYTES.value;
const MAX_NAME = CONSTANTS.QCUDA_MAX_NAME.value;
const MAX_LINK_INPUTS = CONSTANTS.QCUDA_MAX_LINK_INPUTS.value;
const MAX_LINK_OPTIONS = CONSTANTS.QCUDA_MAX_LINK_OPTIONS.value;
const LINK_NAME = CONSTANTS.QCUDA_LINK_NAME.value;

export const STRUCTS = {
  virtio_qcuda_config: {
    doc: 'Device config space, read by the driver at probe (served by the backend).',
    fields: [
      ['magic', 'u32'],
      ['proto_version', 'u32'],
      ['num_queues', 'u32', 'request queues'],
      ['queue_size', 'u32'],
      ['capabilities', 'u64', 'QCUDA_CAP_*'],
      ['reserved', 'u64[2]'],
    ],
  },
  qcuda_req_hdr: {
    fields: [
      ['cmd', 'u32', 'QCUDA_CMD_*'],
      ['len', 'u32', 'argument bytes after this header'],
      ['session', 'u64', 'from QCUDA_CMD_SESSION_OPEN; 0 before'],
      ['data_offset', 'u64', "where this chunk's data starts in the transfer"],
      ['data_len', 'u64', 'data bytes in this chunk (0 if none)'],
    ],
  },
  qcuda_resp_hdr: {
    fields: [
      ['status', 'u32', '0, a cudaError_t, or QCUDA_ST_*'],
      ['len', 'u32', 'output bytes written after this header'],
      ['value', 'u64', 'command-specific result'],
    ],
  },
  qcuda_args_session_open: {
    fields: [
      ['flags', 'u32', 'QCUDA_SESSION_*'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_hello: {
    fields: [
      ['proto_version', 'u32', 'QCUDA_PROTO_VERSION of the guest library'],
      ['cuda_version', 'u32', 'CUDART_VERSION the library implements'],
    ],
  },
  qcuda_out_hello: {
    fields: [
      ['proto_version', 'u32', "the backend's"],
      ['driver_version', 'u32', 'cuDriverGetVersion on the host'],
      ['device_count', 'u32'],
      ['reserved', 'u32'],
      ['capabilities', 'u64', 'QCUDA_CAP_*'],
      ['memory_limit', 'u64', 'per-VM device memory quota in bytes, 0 = none'],
    ],
  },
  qcuda_args_device: {
    fields: [
      ['device', 'u32'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_out_device_props: {
    fields: [
      ['name', `char[256]`],
      ['uuid', 'u8[16]'],
      ['total_mem', 'u64', 'what the guest may use (the quota if set)'],
      ['attrs', `u32[${NUM_ATTRS}]`, 'indexed by CUdevice_attribute'],
    ],
  },
  qcuda_args_peer: {
    doc: 'Peer access between two devices of the session (PEER_*).',
    fields: [
      ['device', 'u32'],
      ['peer', 'u32'],
      ['attr', 'u32', 'P2P_ATTRIBUTE: a cudaDeviceP2PAttr (device: src, peer: dst); 0 otherwise'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_out_mem_info: {
    fields: [
      ['free', 'u64'],
      ['total', 'u64'],
    ],
  },
  qcuda_args_malloc: { fields: [['size', 'u64']] },
  qcuda_args_ptr: { fields: [['ptr', 'u64']] },
  qcuda_args_handle: { fields: [['handle', 'u64']] },
  qcuda_args_memcpy: {
    doc: 'Copies: size is the whole transfer; chunks carry data_offset/data_len.',
    fields: [
      ['dst', 'u64', 'device pointer (HTOD, DTOD)'],
      ['src', 'u64', 'device pointer (DTOH, DTOD)'],
      ['size', 'u64'],
      ['stream', 'u64', 'stream handle'],
      ['async', 'u32', '1: enqueue on the stream and return'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_memset: {
    fields: [
      ['dst', 'u64'],
      ['size', 'u64'],
      ['stream', 'u64'],
      ['value', 'u32', 'the byte value in the low 8 bits'],
      ['async', 'u32'],
    ],
  },
  qcuda_args_host_map: {
    fields: [
      ['gpa', 'u64', 'guest-physical start (contiguous)'],
      ['size', 'u64'],
    ],
  },
  qcuda_args_host_map_pages: {
    fields: [
      ['key', 'u64', 'from the library: an address in its HOST_ALLOC or HOST_REGISTER range (page aligned); the guest driver sends 0'],
      ['size', 'u64', 'bytes (whole pages)'],
      ['count', 'u32', 'extents that follow (the guest driver fills them in)'],
      ['reserved', 'u32'],
    ],
    trailer: 'followed by count struct qcuda_extent, in order, their lengths adding up to size',
  },
  qcuda_extent: {
    fields: [
      ['gpa', 'u64', 'guest-physical start, page aligned'],
      ['len', 'u64', 'bytes, whole pages'],
    ],
  },
  qcuda_args_stream_create: {
    fields: [
      ['flags', 'u32', 'cudaStreamDefault / cudaStreamNonBlocking'],
      ['priority', 'i32', 'as cudaStreamCreateWithPriority'],
    ],
  },
  qcuda_args_stream_wait_event: {
    fields: [
      ['stream', 'u64'],
      ['event', 'u64'],
      ['flags', 'u32'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_event_create: {
    fields: [
      ['flags', 'u32', 'cudaEventDefault, BlockingSync, DisableTiming'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_event_record: {
    fields: [
      ['event', 'u64'],
      ['stream', 'u64'],
    ],
  },
  qcuda_args_event_elapsed: {
    fields: [
      ['start', 'u64'],
      ['end', 'u64'],
    ],
  },
  qcuda_out_event_elapsed: {
    fields: [
      ['ms_bits', 'u32', 'the float milliseconds, bit for bit'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_module_upload: {
    fields: [
      ['upload_id', 'u64', 'chosen by the library, unique in its session'],
      ['size', 'u64', 'the whole image (QCUDA_MAX_MODULE at most)'],
    ],
  },
  qcuda_args_module_load: { fields: [['upload_id', 'u64']] },
  qcuda_args_module_find: {
    fields: [
      ['upload_id', 'u64', 'the upload to stage the image as'],
      ['size', 'u64', "the image's bytes"],
      ['sha256', 'u8[32]', "the image's SHA-256"],
    ],
  },
  qcuda_args_link: {
    doc: 'JIT linking (cuLinkComplete): the inputs are finished module uploads (MODULE_UPLOAD), taken (their staging given back) by the LINK whatever its outcome.',
    fields: [
      ['num_inputs', 'u32', '1..QCUDA_MAX_LINK_INPUTS'],
      ['num_options', 'u32', '0..QCUDA_MAX_LINK_OPTIONS'],
      ['upload_id', `u64[${MAX_LINK_INPUTS}]`],
      ['type', `u32[${MAX_LINK_INPUTS}]`, 'CUjitInputType of each input'],
      ['option', `u32[${MAX_LINK_OPTIONS}]`, 'CU_JIT_OPTIMIZATION_LEVEL, _TARGET, _GENERATE_DEBUG_INFO, _LOG_VERBOSE, _GENERATE_LINE_INFO'],
      ['value', `u32[${MAX_LINK_OPTIONS}]`],
      ['name', `char[${MAX_LINK_INPUTS * LINK_NAME}]`, "input i's name at i * QCUDA_LINK_NAME, NUL-terminated"],
    ],
  },
  qcuda_out_link: {
    doc: "The link's result, kept by the backend as image bytes, then the info log, then the error log (LINK_READ).",
    fields: [
      ['image_bytes', 'u64', '0 when the link failed'],
      ['info_bytes', 'u32'],
      ['error_bytes', 'u32'],
      ['wall_ms_bits', 'u32', 'CU_JIT_WALL_TIME: the float milliseconds, bit for bit'],
      ['link_status', 'u32', "the host linker's CUresult (0: linked)"],
    ],
  },
  qcuda_args_link_read: {
    fields: [
      ['link', 'u64', "LINK's value: the result id"],
      ['offset', 'u64', 'into image, info log, error log, one after another'],
    ],
  },
  qcuda_args_symbol: {
    fields: [
      ['module', 'u64'],
      ['name', `char[${MAX_NAME}]`, 'NUL-terminated mangled name'],
    ],
  },
  qcuda_out_func_info: {
    doc: "The kernel's parameter layout as the host driver reports it (cuFuncGetParamInfo): the library packs launch parameters exactly so, and the backend refuses a launch whose parameter block differs in size.",
    fields: [
      ['num_params', 'u32'],
      ['param_bytes', 'u32', 'offset + size of the last parameter'],
      ['offset', `u32[${MAX_PARAMS}]`],
      ['size', `u32[${MAX_PARAMS}]`],
    ],
  },
  qcuda_out_var_info: {
    fields: [
      ['dptr', 'u64'],
      ['size', 'u64'],
    ],
  },
  qcuda_args_launch: {
    fields: [
      ['func', 'u64', 'handle from FUNC_GET'],
      ['stream', 'u64'],
      ['grid', 'u32[3]'],
      ['block', 'u32[3]'],
      ['shared_mem', 'u32'],
      ['param_bytes', 'u32', 'bytes of packed parameters after this struct'],
    ],
    trailer: 'followed by param_bytes of parameters',
  },
  qcuda_args_launch_ex: {
    fields: [
      ['func', 'u64', 'handle from FUNC_GET'],
      ['stream', 'u64'],
      ['grid', 'u32[3]'],
      ['block', 'u32[3]'],
      ['shared_mem', 'u32'],
      ['param_bytes', 'u32', 'bytes of packed parameters after this struct'],
      ['cluster', 'u32[3]', 'blocks per cluster in each dimension (1, 1, 1: none)'],
      ['flags', 'u32', 'QCUDA_LAUNCH_*'],
    ],
    trailer: 'followed by param_bytes of parameters',
  },
  qcuda_out_func_attrs: { fields: [['values', `u32[${NUM_FUNC_ATTRS}]`]] },
  qcuda_args_func_attr: {
    fields: [
      ['func', 'u64', 'handle from FUNC_GET'],
      ['attr', 'u32', 'cudaFuncAttribute (== CUfunction_attribute)'],
      ['value', 'i32', "as cudaFuncSetAttribute's int"],
    ],
  },
  qcuda_args_occupancy: {
    doc: 'OCCUPANCY_BLOCKS uses dynamic_smem and flags, OCCUPANCY_SMEM num_blocks.',
    fields: [
      ['func', 'u64'],
      ['dynamic_smem', 'u64', 'bytes per block'],
      ['block_size', 'i32', 'threads per block'],
      ['flags', 'u32', 'cudaOccupancyDefault / DisableCachingOverride'],
      ['num_blocks', 'i32'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_limit: {
    fields: [
      ['limit', 'u32', 'cudaLimit (== CUlimit)'],
      ['reserved', 'u32'],
      ['value', 'u64', 'LIMIT_SET only'],
    ],
  },
  qcuda_args_stream_attr: {
    fields: [
      ['stream', 'u64'],
      ['attr', 'u32', 'cudaStreamAttrID (== CUstreamAttrID)'],
      ['reserved', 'u32'],
      ['value', `u8[${ATTR_VALUE_BYTES}]`, 'STREAM_SET_ATTR only'],
    ],
  },
  qcuda_out_stream_attr_value: { fields: [['value', `u8[${ATTR_VALUE_BYTES}]`]] },
  qcuda_out_priority_range: {
    doc: 'cudaDeviceGetStreamPriorityRange: numerically, greatest <= least (a lower number is a higher priority).',
    fields: [
      ['least', 'i32'],
      ['greatest', 'i32'],
    ],
  },
  qcuda_args_host_func: {
    fields: [
      ['stream', 'u64'],
      ['id', 'u64', 'chosen by the library: nonzero, unique in its session'],
    ],
  },
  qcuda_args_callback_wait: { fields: [['done', 'u64', 'the callback that has run, 0 if none']] },
  qcuda_out_callback: {
    fields: [
      ['id', 'u64', 'the callback to run now'],
      ['status', 'u32', "the stream's error at that point (cudaStreamAddCallback's status)"],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_batch: {
    fields: [
      ['count', 'u32', 'entries'],
      ['flags', 'u32', 'QCUDA_BATCH_ENDS_SYNC or 0'],
      ['bytes', 'u64', '== hdr.data_len; QCUDA_MAX_BATCH at most'],
    ],
  },
  qcuda_batch_entry: {
    fields: [
      ['cmd', 'u32', 'QCUDA_CMD_* (a postable one)'],
      ['len', 'u32', 'argument bytes after this header (unpadded)'],
    ],
  },
  qcuda_args_memcpy_3d: {
    doc: "A 2D/3D copy (MEMCPY_3D_*): a box of width bytes x height rows x depth slices from one side to the other. A side is linear device memory (ptr: its start; pitch: bytes per row; rows: rows per slice), an array (ptr: its handle; x in bytes, a multiple of its element size) or the data (host side: x, y, z 0; the data holds the box's first byte to its last, size bytes in all, rows pitch apart and slices pitch * rows apart). The backend walks the rows of each chunk itself: one request, whatever the row count.",
    fields: [
      ['dst', 'u64', 'device pointer or array handle (QCUDA_MEM_HOST: unused)'],
      ['src', 'u64'],
      ['dst_pitch', 'u64'],
      ['src_pitch', 'u64'],
      ['dst_rows', 'u64', 'rows per slice'],
      ['src_rows', 'u64'],
      ['dst_x', 'u64', 'bytes'],
      ['dst_y', 'u64'],
      ['dst_z', 'u64'],
      ['src_x', 'u64'],
      ['src_y', 'u64'],
      ['src_z', 'u64'],
      ['width', 'u64', 'bytes'],
      ['height', 'u64'],
      ['depth', 'u64'],
      ['size', 'u64', "the host side's bytes (the whole transfer); 0 without one"],
      ['stream', 'u64'],
      ['dst_kind', 'u32', 'QCUDA_MEM_*'],
      ['src_kind', 'u32'],
      ['async', 'u32'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_memset_2d: {
    fields: [
      ['dst', 'u64'],
      ['pitch', 'u64'],
      ['width', 'u64', 'bytes'],
      ['height', 'u64'],
      ['stream', 'u64'],
      ['value', 'u32', 'the byte value in the low 8 bits'],
      ['async', 'u32'],
    ],
  },
  qcuda_args_array_create: {
    doc: 'As CUDA_ARRAY3D_DESCRIPTOR: height 0 for a 1D array, depth 0 for a 2D one (the layer count for a layered one, 6 (times the layers) for a cubemap).',
    fields: [
      ['width', 'u64'],
      ['height', 'u64'],
      ['depth', 'u64'],
      ['format', 'u32', 'CUarray_format'],
      ['channels', 'u32', '1, 2 or 4'],
      ['flags', 'u32', 'CUDA_ARRAY3D_LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_mipmap_create: {
    doc: "A mipmapped array: the level-0 shape as ARRAY_CREATE's, and its level count.",
    fields: [
      ['width', 'u64'],
      ['height', 'u64'],
      ['depth', 'u64'],
      ['format', 'u32', 'CUarray_format'],
      ['channels', 'u32'],
      ['flags', 'u32'],
      ['levels', 'u32', '1 .. 1 + log2 of the largest extent'],
    ],
  },
  qcuda_args_mipmap_level: {
    fields: [
      ['handle', 'u64', 'the mipmapped array'],
      ['level', 'u32'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_args_tex_create: {
    doc: "A texture object (cuTexObjectCreate): the resource (an array of the session, or its linear / pitched device memory) and CUDA_TEXTURE_DESC's fields; no view.",
    fields: [
      ['res_type', 'u32', 'CUresourcetype: 0 array, 1 mipmapped array, 2 linear, 3 pitch2D'],
      ['format', 'u32', 'linear / pitch2D: CUarray_format'],
      ['channels', 'u32', 'linear / pitch2D'],
      ['reserved', 'u32'],
      ['res', 'u64', 'the (mipmapped) array handle, or the device pointer'],
      ['width', 'u64', 'pitch2D: elements'],
      ['height', 'u64', 'pitch2D'],
      ['pitch', 'u64', 'pitch2D: bytes'],
      ['size', 'u64', 'linear: bytes'],
      ['address_mode', 'u32[3]', 'CUaddress_mode'],
      ['filter_mode', 'u32', 'CUfilter_mode'],
      ['flags', 'u32', 'CU_TRSF_*'],
      ['max_anisotropy', 'u32'],
      ['mipmap_filter_mode', 'u32'],
      ['mipmap_level_bias', 'u32', 'float bits'],
      ['min_lod', 'u32', 'float bits'],
      ['max_lod', 'u32', 'float bits'],
      ['border_color', 'u32[4]', 'float bits'],
    ],
  },
  qcuda_args_graph_cond: {
    fields: [
      ['graph', 'u64', 'from GRAPH_CREATE'],
      ['default_value', 'u32'],
      ['flags', 'u32', 'cudaGraphCondAssignDefault or 0'],
    ],
  },
  qcuda_args_graph_instantiate: {
    doc: "The graph's nodes, staged as upload_id (MODULE_UPLOAD's staging): nodes structs qcuda_graph_node, then edges structs qcuda_graph_edge, then the kernels' parameters; size bytes in all.",
    fields: [
      ['graph', 'u64', 'from GRAPH_CREATE: where the conditional handles live'],
      ['upload_id', 'u64'],
      ['size', 'u64'],
      ['nodes', 'u32'],
      ['edges', 'u32'],
    ],
  },
  qcuda_graph_node: {
    doc: "A node of GRAPH_INSTANTIATE. Nodes come parents first: a body node's parent (a QCUDA_GNODE_COND node) has a lower index.",
    fields: [
      ['type', 'u32', 'QCUDA_GNODE_*'],
      ['parent', 'u32', 'index of the conditional node whose body holds it, or QCUDA_GRAPH_TOP'],
      ['body', 'u32', 'which body of the parent'],
      ['param_bytes', 'u32', 'kernel'],
      ['handle', 'u64', 'kernel: function; event nodes: event; conditional: its handle'],
      ['dst', 'u64', 'memcpy, memset'],
      ['src', 'u64', 'memcpy'],
      ['pitch', 'u64', 'memcpy: dst pitch; memset'],
      ['src_pitch', 'u64'],
      ['rows', 'u64', 'memcpy: dst rows per slice'],
      ['src_rows', 'u64'],
      ['width', 'u64', 'memcpy: bytes; memset: elements'],
      ['height', 'u64'],
      ['depth', 'u64', 'memcpy'],
      ['param_off', 'u64', 'kernel: where its parameters start, after the edges'],
      ['grid', 'u32[3]'],
      ['block', 'u32[3]'],
      ['shared_mem', 'u32'],
      ['value', 'u32', 'memset'],
      ['elem', 'u32', 'memset: 1, 2 or 4'],
      ['cond_type', 'u32', 'cudaGraphCondType'],
      ['size', 'u32', 'conditional: bodies'],
      ['reserved', 'u32'],
    ],
  },
  qcuda_graph_edge: {
    fields: [
      ['from', 'u32'],
      ['to', 'u32', 'from < to, both in the same body'],
    ],
  },
  qcuda_args_graph_launch: {
    fields: [
      ['exec', 'u64', 'from GRAPH_INSTANTIATE'],
      ['stream', 'u64'],
    ],
  },
  qcuda_args_vmm_reserve: {
    fields: [
      ['size', 'u64', 'a multiple of QCUDA_VMM_GRANULARITY'],
      ['alignment', 'u64', '0 (the granularity) or a power of two'],
      ['addr', 'u64', 'a hint (0: none)'],
      ['flags', 'u64', '0'],
    ],
  },
  qcuda_args_vmm_range: {
    fields: [
      ['ptr', 'u64'],
      ['size', 'u64'],
    ],
  },
  qcuda_args_vmm_create: {
    fields: [
      ['size', 'u64', 'a multiple of QCUDA_VMM_GRANULARITY'],
      ['flags', 'u64', '0'],
    ],
  },
  qcuda_args_vmm_map: {
    fields: [
      ['ptr', 'u64', 'inside a reservation of the session'],
      ['size', 'u64'],
      ['offset', 'u64', 'into the physical allocation: 0, as CUDA asks'],
      ['handle', 'u64', 'from VMM_CREATE'],
      ['flags', 'u64', '0'],
    ],
  },
  qcuda_args_vmm_access: {
    fields: [
      ['ptr', 'u64'],
      ['size', 'u64'],
      ['device', 'u32', "the location: the session's device"],
      ['prot', 'u32', 'QCUDA_VMM_ACCESS_RW'],
    ],
  },
  qcuda_out_output_read: {
    fields: [
      ['kind', 'u32', 'QCUDA_OUTPUT_*; 0 when nothing was waiting'],
      ['more', 'u32', '1: more output is waiting'],
    ],
  },
} as const satisfies Record<string, StructDecl>;

export type StructName = keyof typeof STRUCTS;

// ---- calls

/** Kinds of handle a call may take: ids in the caller's session's tables. */
export type HandleKind = 'stream' | 'event' | 'module' | 'function';

/**
 * How a call a provider context answers maps onto its method: the arguments
 * it passes (handles resolved to the provider's objects), what it makes of
 * the result, and the flag bits it admits. From it come the ProviderContext
 * method (provider.ts), its forwarding to a session's worker (isolated.ts,
 * worker.ts) and, for the cuda provider, the addon method of the same name.
 */
export interface ContextDecl {
  readonly method: string;
  readonly params: readonly string[];
  /**
   * none: no value; value: the u64 reply value; signed: an int as the reply
   * value; ready: cudaSuccess or cudaErrorNotReady (not ready either while a
   * host function holds the handle); out: the output struct's fields;
   * stream / event: a new handle of that kind; memory: free and total bytes
   * (the output struct's), as the VM sees them through its quota (a total
   * of at most its limit, a free of at most what it has left).
   */
  readonly result: 'none' | 'value' | 'signed' | 'ready' | 'out' | 'stream' | 'event' | 'memory';
  /** Argument fields holding flags, and the bits each admits (others: cudaErrorInvalidValue). */
  readonly flags?: Readonly<Record<string, number>>;
}

export interface CallDecl {
  readonly cmd: number;
  /** For the header: what the call does. */
  readonly doc: string;
  /** What the reply's value is, for calls that return one (those of `context` results stream, event, value and signed say it themselves). */
  readonly value?: string;
  readonly args?: StructName;
  readonly out?: StructName;
  /** Data moved with the call: 'to' the device (readable) or 'from' it (the last writable bytes). */
  readonly data?: 'to' | 'from';
  /** The argument struct may be followed by more argument bytes (checked by the call). */
  readonly varArgs?: boolean;
  /** Argument fields that are handles, and of what. */
  readonly handles?: Readonly<Record<string, HandleKind>>;
  /** The handle field the call ends: the session forgets it before the provider frees it. */
  readonly ends?: string;
  /** The stream field (or 'all') it runs after the host functions marked before it on (callbacks.ts). */
  readonly stream?: string;
  /** The event field whose deferred record it waits for. */
  readonly event?: string;
  /** May be sent later, in a BATCH (it enqueues work and never waits for it). */
  readonly posted?: boolean;
  /** The guest library sends it without flushing posted work first (the batch itself; the callback thread's wait). */
  readonly unbatched?: boolean;
  /**
   * Synchronizes: its status is also the first error of posted work since
   * the last such call. It takes no data and has no output, so it may also
   * end a batch (QCUDA_BATCH_ENDS_SYNC: the guest library sends it with the
   * posted work it flushes).
   */
  readonly syncs?: boolean;
  /**
   * Who answers: the virtio device itself (requests of the guest kernel
   * driver, no session), the backend from the session's state, or the
   * session's provider context (in the session's worker when isolated).
   */
  readonly side: 'device' | 'backend' | 'context';
  /** For calls a context answers one to one: how (see ContextDecl). */
  readonly context?: ContextDecl;
}

export const CALLS = {
  NOP: { cmd: 0, side: 'device', doc: 'Echo: out = the arguments.', value: 'the queue index' },
  SESSION_OPEN: {
    cmd: 1,
    side: 'device',
    args: 'qcuda_args_session_open',
    doc: 'Sent by the driver when a process opens / closes the device: the backend creates / frees the session (every handle and allocation of that process). The arguments may be left out (no flags).',
    value: 'the new session id',
  },
  SESSION_CLOSE: { cmd: 2, side: 'device', doc: '' },

  // From the guest library (hdr.session filled in by the driver).
  HELLO: {
    cmd: 16,
    side: 'backend',
    args: 'qcuda_args_hello',
    out: 'qcuda_out_hello',
    doc: '',
    value: "the backend's version when status is QCUDA_ST_VERSION",
  },
  DEVICE_PROPS: { cmd: 17, side: 'backend', args: 'qcuda_args_device', out: 'qcuda_out_device_props', doc: '' },
  SET_DEVICE: { cmd: 18, side: 'backend', args: 'qcuda_args_device', doc: '' },
  DEVICE_SYNC: { cmd: 19, side: 'context', stream: 'all', syncs: true, doc: 'cudaDeviceSynchronize' },
  DEVICE_RESET: { cmd: 20, side: 'backend', doc: "frees the session's resources" },
  MEM_GET_INFO: {
    cmd: 21,
    side: 'context',
    out: 'qcuda_out_mem_info',
    doc: 'cudaMemGetInfo',
    context: { method: 'memGetInfo', params: [], result: 'memory' },
  },
  MALLOC: { cmd: 22, side: 'context', args: 'qcuda_args_malloc', doc: '', value: 'the device pointer' },
  FREE: { cmd: 23, side: 'context', args: 'qcuda_args_ptr', doc: '' },
  MEMCPY_HTOD: {
    cmd: 24,
    side: 'context',
    args: 'qcuda_args_memcpy',
    data: 'to',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'src unused',
  },
  MEMCPY_DTOH: {
    cmd: 25,
    side: 'context',
    args: 'qcuda_args_memcpy',
    data: 'from',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'dst unused',
  },
  MEMCPY_DTOD: {
    cmd: 26,
    side: 'context',
    args: 'qcuda_args_memcpy',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'posted with async = 1',
  },
  MEMSET: {
    cmd: 27,
    side: 'context',
    args: 'qcuda_args_memset',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'posted with async = 1',
  },
  HOST_MAP: { cmd: 28, side: 'context', args: 'qcuda_args_host_map', doc: 'guest memory the GPU may address', value: 'its device pointer' },
  HOST_MAP_PAGES: {
    cmd: 160,
    side: 'context',
    args: 'qcuda_args_host_map_pages',
    varArgs: true,
    doc: 'HOST_MAP of guest pages that are not physically contiguous (managed or mapped memory of any size): the backend maps them in order into one range of its own and registers that; QCUDA_MAX_EXTENTS at most',
    value: 'its device pointer',
  },
  HOST_UNMAP: { cmd: 29, side: 'context', args: 'qcuda_args_ptr', doc: 'ptr: the device pointer' },

  STREAM_CREATE: {
    cmd: 32,
    side: 'context',
    args: 'qcuda_args_stream_create',
    doc: '',
    context: { method: 'streamCreate', params: ['flags', 'priority'], result: 'stream', flags: { flags: 0x1 } },
  },
  STREAM_DESTROY: {
    cmd: 33,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    ends: 'handle',
    doc: '',
    context: { method: 'streamDestroy', params: ['handle'], result: 'none' },
  },
  STREAM_SYNC: {
    cmd: 34,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    stream: 'handle',
    syncs: true,
    doc: '',
    context: { method: 'streamSynchronize', params: ['handle'], result: 'none' },
  },
  STREAM_QUERY: {
    cmd: 35,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    doc: 'status = cudaSuccess or cudaErrorNotReady',
    context: { method: 'streamQuery', params: ['handle'], result: 'ready' },
  },
  STREAM_WAIT_EVENT: {
    cmd: 36,
    side: 'context',
    args: 'qcuda_args_stream_wait_event',
    handles: { stream: 'stream', event: 'event' },
    stream: 'stream',
    event: 'event',
    posted: true,
    doc: '',
    context: { method: 'streamWaitEvent', params: ['stream', 'event', 'flags'], result: 'none' },
  },
  STREAM_SET_ATTR: { cmd: 66, side: 'context', args: 'qcuda_args_stream_attr', handles: { stream: 'stream' }, doc: '' },
  STREAM_GET_ATTR: {
    cmd: 67,
    side: 'context',
    args: 'qcuda_args_stream_attr',
    out: 'qcuda_out_stream_attr_value',
    handles: { stream: 'stream' },
    doc: 'args.value unused',
  },
  STREAM_GET_PRIORITY: {
    cmd: 71,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    doc: 'cudaStreamGetPriority',
    context: { method: 'streamGetPriority', params: ['handle'], result: 'signed' },
  },
  STREAM_PRIORITY_RANGE: {
    cmd: 72,
    side: 'context',
    out: 'qcuda_out_priority_range',
    doc: "cudaDeviceGetStreamPriorityRange of the session's context",
    context: { method: 'streamPriorityRange', params: [], result: 'out' },
  },
  CTX_RESET_PERSISTING_L2: {
    cmd: 73,
    side: 'context',
    doc: 'cudaCtxResetPersistingL2Cache: persisting L2 lines become normal',
    context: { method: 'resetPersistingL2Cache', params: [], result: 'none' },
  },

  EVENT_CREATE: {
    cmd: 40,
    side: 'context',
    args: 'qcuda_args_event_create',
    doc: '',
    context: { method: 'eventCreate', params: ['flags'], result: 'event', flags: { flags: 0x7 } },
  },
  EVENT_DESTROY: {
    cmd: 41,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    ends: 'handle',
    doc: '',
    context: { method: 'eventDestroy', params: ['handle'], result: 'none' },
  },
  EVENT_RECORD: {
    cmd: 42,
    side: 'context',
    args: 'qcuda_args_event_record',
    handles: { event: 'event', stream: 'stream' },
    stream: 'stream',
    posted: true,
    doc: '',
    context: { method: 'eventRecord', params: ['event', 'stream'], result: 'none' },
  },
  EVENT_SYNC: {
    cmd: 43,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    event: 'handle',
    syncs: true,
    doc: '',
    context: { method: 'eventSynchronize', params: ['handle'], result: 'none' },
  },
  EVENT_QUERY: {
    cmd: 44,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    doc: 'status = cudaSuccess or cudaErrorNotReady',
    context: { method: 'eventQuery', params: ['handle'], result: 'ready' },
  },
  EVENT_ELAPSED: {
    cmd: 45,
    side: 'context',
    args: 'qcuda_args_event_elapsed',
    out: 'qcuda_out_event_elapsed',
    handles: { start: 'event', end: 'event' },
    doc: '',
  },

  MODULE_UPLOAD: {
    cmd: 48,
    side: 'backend',
    args: 'qcuda_args_module_upload',
    data: 'to',
    doc: 'Modules: a fat binary crosses once per module: first MODULE_UPLOAD (data to device, chunked like any transfer) into a staging buffer of the session named by upload_id, then MODULE_LOAD of that buffer (value = module handle; the staging buffer is freed).',
  },
  MODULE_LOAD: { cmd: 49, side: 'context', args: 'qcuda_args_module_load', doc: '', value: 'the module handle' },
  MODULE_FIND: {
    cmd: 57,
    side: 'backend',
    args: 'qcuda_args_module_find',
    doc: 'Before MODULE_UPLOAD: an image the VM loaded before (the backend keeps images by content, bounded in bytes) is staged as upload_id without crossing again; then MODULE_LOAD as after an upload.',
    value: '1: staged (no MODULE_UPLOAD needed); 0: not cached, upload it',
  },
  LINK: {
    cmd: 58,
    side: 'context',
    args: 'qcuda_args_link',
    out: 'qcuda_out_link',
    doc: "JIT linking: the host driver links the uploaded inputs (cuLinkCreate/AddData/Complete) into a cubin, kept by the backend (at most 4 results a session, counted against the VM's staging bound) until LINK_READ has read its last byte or the session ends. A failed link answers status 0 with link_status set and its logs kept.",
    value: 'the result id (for LINK_READ)',
  },
  LINK_READ: {
    cmd: 59,
    side: 'backend',
    args: 'qcuda_args_link_read',
    data: 'from',
    doc: "Copies a LINK result's bytes from args.offset into the data (from device: one chunk, data_offset 0, data_len 1..QCUDA_CHUNK); the result is dropped once its last byte is read.",
    value: 'the bytes written',
  },
  MODULE_UNLOAD: { cmd: 50, side: 'context', args: 'qcuda_args_handle', handles: { handle: 'module' }, ends: 'handle', doc: '' },
  FUNC_GET: {
    cmd: 51,
    side: 'context',
    args: 'qcuda_args_symbol',
    out: 'qcuda_out_func_info',
    handles: { module: 'module' },
    doc: '',
    value: 'the function handle',
  },
  VAR_GET: {
    cmd: 52,
    side: 'context',
    args: 'qcuda_args_symbol',
    out: 'qcuda_out_var_info',
    handles: { module: 'module' },
    doc: 'the variable becomes addressable memory of the session',
  },
  LAUNCH: {
    cmd: 53,
    side: 'context',
    args: 'qcuda_args_launch',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    posted: true,
    doc: 'param_bytes of packed parameters follow the struct; enqueued, not waited for: errors of the kernel surface at the next synchronizing call',
  },
  LAUNCH_COOPERATIVE: {
    cmd: 68,
    side: 'context',
    args: 'qcuda_args_launch',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    doc: 'as LAUNCH, for a grid whose blocks synchronize (cudaLaunchCooperativeKernel)',
  },
  LAUNCH_EX: {
    cmd: 69,
    side: 'context',
    args: 'qcuda_args_launch_ex',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    doc: "as LAUNCH, with launch attributes (cuLaunchKernelEx): thread-block clusters, cooperative; not posted: whether the grid can be launched so is this call's answer",
  },
  FUNC_ATTRS: {
    cmd: 60,
    side: 'context',
    args: 'qcuda_args_handle',
    out: 'qcuda_out_func_attrs',
    handles: { handle: 'function' },
    doc: '',
  },
  FUNC_SET_ATTR: {
    cmd: 61,
    side: 'context',
    args: 'qcuda_args_func_attr',
    handles: { func: 'function' },
    doc: 'attr: a cudaFuncAttribute',
  },
  OCCUPANCY_BLOCKS: {
    cmd: 62,
    side: 'context',
    args: 'qcuda_args_occupancy',
    handles: { func: 'function' },
    doc: '',
    value: 'active blocks per SM',
  },
  OCCUPANCY_SMEM: {
    cmd: 63,
    side: 'context',
    args: 'qcuda_args_occupancy',
    handles: { func: 'function' },
    doc: '',
    value: 'dynamic shared memory bytes per block that lets num_blocks blocks fit',
  },
  LIMIT_SET: { cmd: 64, side: 'context', args: 'qcuda_args_limit', doc: "a cudaLimit of the session's context" },
  LIMIT_GET: { cmd: 65, side: 'context', args: 'qcuda_args_limit', doc: 'args.value unused', value: 'the limit' },

  MEMCPY_3D_HTOD: {
    cmd: 140,
    side: 'context',
    args: 'qcuda_args_memcpy_3d',
    data: 'to',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'cudaMemcpy2D/3D from guest memory (src_kind QCUDA_MEM_HOST) to linear memory or an array',
  },
  MEMCPY_3D_DTOH: {
    cmd: 141,
    side: 'context',
    args: 'qcuda_args_memcpy_3d',
    data: 'from',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'cudaMemcpy2D/3D from linear memory or an array to guest memory (dst_kind QCUDA_MEM_HOST)',
  },
  MEMCPY_3D_DTOD: {
    cmd: 142,
    side: 'context',
    args: 'qcuda_args_memcpy_3d',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'cudaMemcpy2D/3D between linear memory and arrays on the device; posted with async = 1',
  },
  MEMSET_2D: {
    cmd: 143,
    side: 'context',
    args: 'qcuda_args_memset_2d',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'cudaMemset2D: height rows of width bytes, pitch apart; posted with async = 1',
  },
  ARRAY_CREATE: {
    cmd: 144,
    side: 'context',
    args: 'qcuda_args_array_create',
    doc: 'a CUDA array, counted against the quota',
    value: 'the array handle',
  },
  ARRAY_DESTROY: { cmd: 145, side: 'context', args: 'qcuda_args_handle', doc: 'cudaFreeArray' },
  TEX_CREATE: {
    cmd: 146,
    side: 'context',
    args: 'qcuda_args_tex_create',
    doc: 'cudaCreateTextureObject',
    value: 'the texture object, as kernels take it',
  },
  TEX_DESTROY: { cmd: 147, side: 'context', args: 'qcuda_args_handle', doc: 'handle: the texture object' },
  SURF_CREATE: {
    cmd: 148,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: 'cudaCreateSurfaceObject of an array (handle)',
    value: 'the surface object, as kernels take it',
  },
  SURF_DESTROY: { cmd: 149, side: 'context', args: 'qcuda_args_handle', doc: 'handle: the surface object' },

  MIPMAP_CREATE: {
    cmd: 150,
    side: 'context',
    args: 'qcuda_args_mipmap_create',
    doc: 'cudaMallocMipmappedArray, counted against the quota (every level)',
    value: 'the mipmapped array handle',
  },
  MIPMAP_LEVEL: {
    cmd: 151,
    side: 'context',
    args: 'qcuda_args_mipmap_level',
    doc: 'cudaGetMipmappedArrayLevel: the level as an array of the session (freed with its mipmapped array)',
    value: "the level's array handle",
  },
  MIPMAP_DESTROY: { cmd: 152, side: 'context', args: 'qcuda_args_handle', doc: 'cudaFreeMipmappedArray' },

  GRAPH_CREATE: {
    cmd: 170,
    side: 'context',
    doc: "Graphs with conditional nodes run as CUDA graphs of the session's context (a kernel sets a condition through the driver): GRAPH_CREATE makes the graph their handles belong to, GRAPH_COND_HANDLE a handle, GRAPH_INSTANTIATE an executable graph of nodes, GRAPH_LAUNCH runs it; other graphs the library runs itself",
    value: 'the graph handle',
  },
  GRAPH_DESTROY: { cmd: 171, side: 'context', args: 'qcuda_args_handle', doc: 'its executable graphs live on' },
  GRAPH_COND_HANDLE: {
    cmd: 172,
    side: 'context',
    args: 'qcuda_args_graph_cond',
    doc: 'cudaGraphConditionalHandleCreate',
    value: 'the handle, as kernels take it',
  },
  GRAPH_INSTANTIATE: {
    cmd: 173,
    side: 'context',
    args: 'qcuda_args_graph_instantiate',
    doc: 'cudaGraphInstantiate',
    value: 'the executable graph handle',
  },
  GRAPH_EXEC_DESTROY: { cmd: 174, side: 'context', args: 'qcuda_args_handle', doc: '' },
  GRAPH_LAUNCH: {
    cmd: 175,
    side: 'context',
    args: 'qcuda_args_graph_launch',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'enqueued, not waited for',
  },

  VMM_RESERVE: {
    cmd: 180,
    side: 'context',
    args: 'qcuda_args_vmm_reserve',
    doc: 'Virtual memory management (cuMem*): cuMemAddressReserve, a range of device addresses of the session with nothing behind it. VMM_CREATE makes physical memory (counted against the quota like MALLOC), VMM_MAP puts it at an address of a reservation, VMM_SET_ACCESS makes the mapping memory of the session (copies, memsets and kernels may use it). Physical memory is freed once released and unmapped, as CUDA frees it.',
    value: "the range's start",
  },
  VMM_FREE: {
    cmd: 181,
    side: 'context',
    args: 'qcuda_args_vmm_range',
    doc: 'cuMemAddressFree of a whole reservation, with nothing mapped in it',
  },
  VMM_CREATE: {
    cmd: 182,
    side: 'context',
    args: 'qcuda_args_vmm_create',
    doc: "cuMemCreate: pinned device memory of the session's device",
    value: 'the allocation handle',
  },
  VMM_RELEASE: {
    cmd: 183,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: 'cuMemRelease: the handle is gone; the memory lives on while mapped',
  },
  VMM_MAP: {
    cmd: 184,
    side: 'context',
    args: 'qcuda_args_vmm_map',
    doc: 'cuMemMap: granularity-aligned, inside one reservation, over nothing mapped',
  },
  VMM_UNMAP: {
    cmd: 185,
    side: 'context',
    args: 'qcuda_args_vmm_range',
    doc: 'cuMemUnmap: whole mappings, one after another, and nothing unmapped between them',
  },
  VMM_SET_ACCESS: { cmd: 186, side: 'context', args: 'qcuda_args_vmm_access', doc: 'cuMemSetAccess over whole mappings (as VMM_UNMAP)' },
  VMM_GET_ACCESS: {
    cmd: 187,
    side: 'context',
    args: 'qcuda_args_ptr',
    doc: 'cuMemGetAccess of the mapping holding ptr',
    value: 'its access flags (0 until set)',
  },
  VMM_RETAIN: {
    cmd: 188,
    side: 'context',
    args: 'qcuda_args_ptr',
    doc: 'cuMemRetainAllocationHandle: the handle of the allocation mapped at ptr, held once more (VMM_RELEASE it)',
    value: 'the handle',
  },
  VMM_SIZE: {
    cmd: 189,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: "the size of a live handle's allocation (cuMemGetAllocationPropertiesFromHandle checks the handle)",
    value: 'its bytes',
  },

  CAN_ACCESS_PEER: {
    cmd: 190,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceCanAccessPeer (args.attr unused)',
    value: "1: device may reach peer's memory; 0: not (a device and itself too)",
  },
  P2P_ATTRIBUTE: {
    cmd: 191,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceGetP2PAttribute(attr, device, peer): two distinct devices',
    value: "the attribute's value",
  },
  PEER_ENABLE: {
    cmd: 192,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: "cudaDeviceEnablePeerAccess: the current device's context may reach args.peer's memory (args.device and attr unused); cudaErrorPeerAccessAlreadyEnabled the second time, until a PEER_DISABLE or reset",
  },
  PEER_DISABLE: {
    cmd: 193,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceDisablePeerAccess of args.peer (as PEER_ENABLE); cudaErrorPeerAccessNotEnabled where not enabled',
  },

  BATCH: {
    cmd: 54,
    side: 'backend',
    unbatched: true,
    args: 'qcuda_args_batch',
    data: 'to',
    doc: "Posted work: several commands in one request (data to device: args.bytes of entries, each a struct qcuda_batch_entry, then its argument struct as the command takes it, then padding to 8 bytes). Only commands that enqueue and never wait may be posted (the postable ones: LAUNCH, MEMSET and MEMCPY_DTOD with async = 1, EVENT_RECORD, STREAM_WAIT_EVENT, HOST_FUNC). They run in order; one that fails does not stop the others. status = the first failure's. A malformed batch runs nothing. With flags QCUDA_BATCH_ENDS_SYNC the last entry is a synchronizing command, run after the others: status = its status, which reports the others' first failure as posted work's error.",
    value: "the failed entry's index (the entry count if none failed; with QCUDA_BATCH_ENDS_SYNC, among the entries before the last)",
  },
  HOST_FUNC: {
    cmd: 55,
    side: 'backend',
    args: 'qcuda_args_host_func',
    handles: { stream: 'stream' },
    posted: true,
    doc: "Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) run in the guest process, in stream order. HOST_FUNC marks a point in a stream: work on that stream after it waits until the guest says the function has run. The library's callback thread sends CALLBACK_WAIT, which says that callback `done` (0: none) has run and waits for the next marked point the GPU has reached.",
  },
  CALLBACK_WAIT: { cmd: 70, side: 'backend', args: 'qcuda_args_callback_wait', out: 'qcuda_out_callback', unbatched: true, doc: '' },
  OUTPUT_READ: {
    cmd: 56,
    side: 'backend',
    out: 'qcuda_out_output_read',
    data: 'from',
    doc: "Device-side printf and assert output of the session's kernels. The backend keeps what CUDA flushed for the session (at synchronizing calls, blocking copies, module load/unload, context destruction; some at other moments) and OR-s QCUDA_ST_OUTPUT into the status of every reply to the session while any is waiting. OUTPUT_READ takes the oldest waiting output, up to data_len bytes of one kind, into the data (from device, written from its start; one chunk: data_offset 0, data_len 1..QCUDA_CHUNK, since reading consumes).",
    value: 'the bytes written (0: nothing was waiting)',
  },
} as const satisfies Record<string, CallDecl>;

export type CmdName = keyof typeof CALLS;
