// The virtio-qcuda wire protocol, mirrored from guest-driver/include/qcuda_proto.h
// (the one source of truth; test/qcuda/proto.test.ts compiles the header and
// checks every id, size and offset here against it).

export const VIRTIO_ID_QCUDA = 60;
export const QCUDA_MAGIC = 0x44554351;
export const QCUDA_PROTO_VERSION = 1;
export const QCUDA_CONFIG_SIZE = 40;
export const QCUDA_CAP_GPU = 1n << 0n;

/** struct virtio_qcuda_config */
export const ConfigLayout = {
  magic: 0,
  proto_version: 4,
  num_queues: 8,
  queue_size: 12,
  capabilities: 16,
  reserved: 24,
} as const;

/** struct qcuda_req_hdr */
export const ReqHdr = { size: 16, cmd: 0, len: 4, session: 8 } as const;
/** struct qcuda_resp_hdr */
export const RespHdr = { size: 16, status: 0, len: 4, value: 8 } as const;

export enum Cmd {
  NOP = 0,
}

export enum Status {
  OK = 0,
  BAD_REQUEST = 0x10000,
  UNKNOWN_CMD = 0x10001,
  TOO_LARGE = 0x10002,
}
