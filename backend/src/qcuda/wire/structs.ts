// The protocol's structs, each field in order: part of its one declaration
// (protocol.ts says what is derived from it and how; layout.ts gives each
// field C's natural alignment).
import { CONSTANTS } from './constants';
import type { StructDecl } from './layout';

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
  qcuda_ipc_handle: {
    doc: 'cudaIpcMemHandle_t (64 bytes): minted by IPC_GET, opened by IPC_OPEN in another process of the VM.',
    fields: [
      ['token', 'u8[16]', 'random: names the allocation in the backend'],
      ['size', 'u64', "the allocation's bytes"],
      ['reserved', 'u8[40]'],
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
  qcuda_args_cluster_occupancy: {
    doc: 'A launch configuration, as CUlaunchConfig with its cluster attributes (cluster all 0: none given).',
    fields: [
      ['func', 'u64'],
      ['grid', 'u32[3]'],
      ['block', 'u32[3]'],
      ['cluster', 'u32[3]', 'CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION'],
      ['policy', 'u32', 'CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE (0: none given)'],
      ['smem', 'u32', 'dynamic shared memory bytes per block'],
      ['query', 'u32', '0: max active clusters, 1: max potential cluster size'],
    ],
  },
  qcuda_args_tensor_map: {
    doc: "A tensor map's encoding, as cuda.h's cuTensorMapEncode* take it; the arrays' first rank entries count.",
    fields: [
      ['kind', 'u32', '0 tiled, 1 im2col, 2 im2col wide, 3 replace the address of map'],
      ['data_type', 'u32'],
      ['rank', 'u32'],
      ['interleave', 'u32'],
      ['swizzle', 'u32'],
      ['l2_promotion', 'u32'],
      ['oob_fill', 'u32'],
      ['channels_per_pixel', 'u32', 'im2col'],
      ['pixels_per_column', 'u32', 'im2col'],
      ['wide_mode', 'u32', 'im2col wide'],
      ['global_address', 'u64'],
      ['global_dim', 'u64[5]'],
      ['global_strides', 'u64[4]', 'bytes, of dimensions 1 and up'],
      ['box_dim', 'u32[5]', 'tiled'],
      ['element_strides', 'u32[5]'],
      ['lower_corner', 'u32[3]', 'im2col: ints; im2col wide: the first'],
      ['upper_corner', 'u32[3]', 'im2col: ints; im2col wide: the first'],
      ['map', 'u64[16]', 'replace: the map whose address changes'],
    ],
  },
  qcuda_out_tensor_map: { fields: [['map', 'u64[16]', 'CUtensorMap']] },
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
      ['flags', 'u32', 'QCUDA_BATCH_ENDS_SYNC, QCUDA_BATCH_ENDS_QUERY or 0'],
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
      ['cluster', 'u32[3]', 'kernel: its thread-block cluster (1, 1, 1: none)'],
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
