// One attach of a shared-memory region: a vhost-user connection over a
// socket pair into the backend's own server, on which this side plays what
// QEMU and the guest library's transport_user.c play for a guest: the
// negotiation, the region's data area as the one memory region, and the
// guest library's rings at the places it lays them (qcuda_shm.h). So every
// request of the guest takes the path a virtio guest's takes, with its
// checks, quota and worker; this side only forwards kicks.
import {
  bit,
  Connection,
  decodeConfig,
  decodeU64,
  encodeConfig,
  encodeMemTable,
  encodeU64,
  encodeVringAddr,
  encodeVringState,
  EventFd,
  Fd,
  FLAG_NEED_REPLY,
  FLAG_VERSION,
  ProtoF,
  Req,
  reqName,
  VirtioF,
  type Message,
} from '../vhost-user';
import { DATA_GPA, DATA_OFFSET, RING_BYTES, RING_SIZE } from './layout';

/** What the guest library asks for (transport_user.c: negotiate). */
const PROTOCOL = bit(ProtoF.MQ) | bit(ProtoF.REPLY_ACK) | bit(ProtoF.CONFIG) | bit(ProtoF.CONFIGURE_MEM_SLOTS);
/** The device's config space (struct virtio_qcuda_config). */
const CONFIG_SIZE = 40;
/** The frontend-virtual address this side says the data area is at: any value, rings are given in it. */
const USER_ADDR = DATA_GPA;

export interface Started {
  config: Uint8Array;
  rings: number;
}

export class Link {
  readonly #conn: Connection;
  readonly #replies: Message[] = [];
  #waiter: ((m: Message | undefined) => void) | undefined;
  readonly kicks: EventFd[] = [];
  readonly #calls: EventFd[] = [];
  readonly #errs: EventFd[] = [];
  #closed = false;

  /**
   * sock: this side's end of the pair; onClose: the backend ended the connection (a fault,
   * a reset) or broke a ring (the guest scribbled on it: a broken ring serves nothing more).
   */
  constructor(
    sock: Fd,
    private readonly onClose: (reason: Error | undefined) => void,
  ) {
    this.#conn = new Connection(
      sock,
      {
        onMessage: (m) => {
          for (const fd of m.fds) fd.close();
          if (this.#waiter) this.#waiter(m);
          else this.#replies.push(m);
        },
        onClose: (reason) => {
          this.#closed = true;
          this.#waiter?.(undefined);
          this.#dropFds();
          this.onClose(reason);
        },
      },
      true,
    );
  }

  get closed(): boolean {
    return this.#closed;
  }

  async #request(req: Req, payload: Uint8Array = new Uint8Array(0), fds: number[] = [], reply = false): Promise<Uint8Array | undefined> {
    this.#conn.send(req, FLAG_VERSION | (reply ? 0 : FLAG_NEED_REPLY), payload, fds);
    const m = this.#replies.shift() ?? (await new Promise<Message | undefined>((r) => (this.#waiter = r)));
    this.#waiter = undefined;
    if (!m) throw new Error(`the backend closed the connection instead of answering ${reqName(req)}`);
    if (m.request !== req) throw new Error(`reply to ${reqName(m.request)} while waiting for ${reqName(req)}`);
    if (!reply && decodeU64(reqName(req), m.payload) !== 0n) throw new Error(`${reqName(req)} failed in the backend`);
    return m.payload;
  }

  async #u64(req: Req): Promise<bigint> {
    return decodeU64(reqName(req), (await this.#request(req, undefined, [], true))!);
  }

  /**
   * Negotiates, gives the data area (regionFd from DATA_OFFSET, dataBytes long) as the
   * memory, and starts the rings the guest library will use: two where the device has
   * a queue per session, else one (transport_user.c).
   */
  async start(regionFd: number, dataBytes: number): Promise<Started> {
    const features = await this.#u64(Req.GET_FEATURES);
    const protocol = await this.#u64(Req.GET_PROTOCOL_FEATURES);
    if (!(features & bit(VirtioF.PROTOCOL_FEATURES)) || (protocol & PROTOCOL) !== PROTOCOL)
      throw new Error('the device lacks a feature the shared-memory transport needs');
    // SET_PROTOCOL_FEATURES itself has no ack: REPLY_ACK is not on yet.
    this.#conn.send(Req.SET_PROTOCOL_FEATURES, FLAG_VERSION, encodeU64(PROTOCOL));
    const queues = Number(await this.#u64(Req.GET_QUEUE_NUM));
    await this.#request(Req.SET_OWNER);
    await this.#request(Req.SET_FEATURES, encodeU64(bit(VirtioF.VERSION_1) | bit(VirtioF.PROTOCOL_FEATURES)));
    const cfg = encodeConfig({ offset: 0, size: CONFIG_SIZE, flags: 0, data: new Uint8Array(CONFIG_SIZE) });
    const config = decodeConfig('GET_CONFIG', (await this.#request(Req.GET_CONFIG, cfg, [], true))!).data.slice();
    const numQueues = new DataView(config.buffer).getUint32(8, true);
    if (numQueues === 0 || numQueues > queues) throw new Error(`the device's config says ${numQueues} queues of ${queues}`);
    const region = { gpa: DATA_GPA, size: BigInt(dataBytes), userAddr: USER_ADDR, mmapOffset: BigInt(DATA_OFFSET) };
    await this.#request(Req.SET_MEM_TABLE, encodeMemTable([region]), [regionFd]);
    const rings = numQueues > 1 ? 2 : 1;
    for (let i = 0; i < rings; i++) await this.#startRing(i);
    return { config, rings };
  }

  async #startRing(i: number): Promise<void> {
    const at = USER_ADDR + BigInt(i * RING_BYTES);
    const kick = EventFd.create();
    const call = EventFd.create();
    const err = EventFd.create();
    this.kicks.push(kick);
    this.#calls.push(call);
    this.#errs.push(err);
    await this.#request(Req.SET_VRING_NUM, encodeVringState({ index: i, num: RING_SIZE }));
    await this.#request(Req.SET_VRING_BASE, encodeVringState({ index: i, num: 0 }));
    await this.#request(
      Req.SET_VRING_ADDR,
      encodeVringAddr({ index: i, flags: 0, desc: at, avail: at + 4096n, used: at + 8192n, log: 0n }),
    );
    await this.#request(Req.SET_VRING_KICK, encodeU64(BigInt(i)), [kick.value]);
    // Interrupts go nowhere: the guest polls its used rings. Drained, so the counter never fills.
    call.watch(() => undefined, true);
    await this.#request(Req.SET_VRING_CALL, encodeU64(BigInt(i)), [call.value]);
    err.watch(() => {
      if (!this.#closed) this.onClose(new Error(`the backend broke ring ${i}: the guest wrote what no driver writes`));
    }, true);
    await this.#request(Req.SET_VRING_ERR, encodeU64(BigInt(i)), [err.value]);
    await this.#request(Req.SET_VRING_ENABLE, encodeVringState({ index: i, num: 1 }));
  }

  #dropFds(): void {
    for (const f of [...this.kicks, ...this.#calls, ...this.#errs]) f.close();
    this.kicks.length = 0;
    this.#calls.length = 0;
    this.#errs.length = 0;
  }

  /** Ends the connection: the backend drops the device's session and the memory it held. */
  close(): void {
    if (this.#closed) return;
    this.#conn.close();
  }
}
