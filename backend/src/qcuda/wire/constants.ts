// The protocol's constants and statuses: part of its one declaration
// (protocol.ts says what is derived from it and how).

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
    value: 6,
    c: '6u',
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
  QCUDA_MAX_CLUSTER_BLOCKS: {
    value: 16,
    doc: 'LAUNCH_EX: most blocks in a thread-block cluster (what the hardware allows with non-portable sizes; sm_90: 16)',
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
  QCUDA_BATCH_ENDS_QUERY: {
    value: 2,
    c: '2u',
    doc: "qcuda_args_batch.flags: the batch's last entry is a query that does not wait (one declared endsBatch: EVENT_QUERY, STREAM_QUERY), run after the others, so that posted work and the query after it take one round trip. The reply's status is the query's own; its value is the others' first failure (0 if none), posted work's error, which the guest library keeps for its next synchronizing call as it keeps a batch's. Not with QCUDA_BATCH_ENDS_SYNC.",
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
