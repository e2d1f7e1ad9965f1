// The virtio-qcuda device on vhost-user-ts: config space and the request
// dispatcher. Every request is a qcuda_req_hdr (+ payload) in the readable
// part and a qcuda_resp_hdr (+ payload) in the writable part; anything else
// is answered with an error status, never trusted.
import createDebug from 'debug';
import type { Request } from '../vhost-user/request';
import type { VhostUserDevice } from '../vhost-user/device';
import { Cmd, ConfigLayout, QCUDA_CONFIG_SIZE, QCUDA_MAGIC, QCUDA_PROTO_VERSION, ReqHdr, RespHdr, Status } from './proto';

const debug = createDebug('qcuda:device');

/** Largest payload a NOP may echo. */
export const MAX_NOP_PAYLOAD = 64 << 10;

export interface QcudaOptions {
  queues?: number;
  queueSize?: number;
  capabilities?: bigint;
}

interface Reply {
  status: number;
  value?: bigint;
  payload?: Uint8Array;
}

export class QcudaDevice implements VhostUserDevice {
  readonly name = 'qcuda';
  readonly numQueues: number;
  readonly maxQueueSize: number;
  readonly features = 0n;
  readonly configSize = QCUDA_CONFIG_SIZE;
  readonly #capabilities: bigint;
  /** Requests served, per queue (tests and stats read it). */
  readonly served: number[];

  constructor(o: QcudaOptions = {}) {
    this.numQueues = o.queues ?? 4;
    this.maxQueueSize = o.queueSize ?? 256;
    this.#capabilities = o.capabilities ?? 0n;
    this.served = new Array(this.numQueues).fill(0);
  }

  readConfig(): Uint8Array {
    const b = new Uint8Array(QCUDA_CONFIG_SIZE);
    const v = new DataView(b.buffer);
    v.setUint32(ConfigLayout.magic, QCUDA_MAGIC, true);
    v.setUint32(ConfigLayout.proto_version, QCUDA_PROTO_VERSION, true);
    v.setUint32(ConfigLayout.num_queues, this.numQueues, true);
    v.setUint32(ConfigLayout.queue_size, this.maxQueueSize, true);
    v.setBigUint64(ConfigLayout.capabilities, this.#capabilities, true);
    return b;
  }

  handle(req: Request): number {
    if (req.writableBytes < RespHdr.size) throw new RangeError(`no room for a reply header (${req.writableBytes} bytes)`);
    const reply = this.#dispatch(req);
    const payload = reply.payload ?? new Uint8Array(0);
    const hdr = new Uint8Array(RespHdr.size);
    const v = new DataView(hdr.buffer);
    v.setUint32(RespHdr.status, reply.status, true);
    v.setUint32(RespHdr.len, payload.length, true);
    v.setBigUint64(RespHdr.value, reply.value ?? 0n, true);
    req.write(0, hdr);
    req.write(RespHdr.size, payload);
    this.served[req.queue]++;
    return RespHdr.size + payload.length;
  }

  #dispatch(req: Request): Reply {
    if (req.readableBytes < ReqHdr.size) return fail(Status.BAD_REQUEST, `request of ${req.readableBytes} bytes`);
    const h = new DataView(req.read(0, ReqHdr.size).slice().buffer);
    const cmd = h.getUint32(ReqHdr.cmd, true);
    const len = h.getUint32(ReqHdr.len, true);
    if (len !== req.readableBytes - ReqHdr.size) return fail(Status.BAD_REQUEST, `header says ${len} payload bytes, chain has ${req.readableBytes - ReqHdr.size}`);
    switch (cmd) {
      case Cmd.NOP:
        return this.#nop(req, len);
      default:
        return fail(Status.UNKNOWN_CMD, `unknown command ${cmd}`);
    }
  }

  #nop(req: Request, len: number): Reply {
    if (len > MAX_NOP_PAYLOAD || req.writableBytes < RespHdr.size + len) return fail(Status.TOO_LARGE, `NOP of ${len} bytes`);
    return { status: Status.OK, value: BigInt(req.queue), payload: req.read(ReqHdr.size, len).slice() };
  }

  reset(): void {
    debug('reset');
  }
}

function fail(status: Status, why: string): Reply {
  debug('request refused: %s', why);
  return { status };
}
