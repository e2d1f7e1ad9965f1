// Stream and event commands that are more than one context call (the rest
// are derived from their declarations: context-call.ts): stream attributes,
// elapsed time, and host functions, which run in the guest in stream order.
import { checkStreamAttr, streamAttrValue } from '../attrs';
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { encode, QCUDA_ATTR_VALUE_BYTES } from '../proto';
import type { StreamRef } from '../provider';

/** Enqueues an event on the stream and resolves (never rejects) with its status once the GPU got there. */
function reachedAt(c: Call, stream: StreamRef | undefined, device: number | undefined): () => Promise<number> {
  const code = (e: unknown) => (e instanceof CudaError ? e.code : CudaErr.Unknown);
  return async () => {
    try {
      const x = await c.session.context(device); // the stream's own
      const ev = await x.eventCreate(2); // cudaEventDisableTiming
      await x.eventRecord(ev, stream);
      let status = 0;
      try {
        await x.eventSynchronize(ev);
      } catch (e) {
        status = code(e);
      }
      try {
        await x.eventDestroy(ev);
      } catch {
        // the event goes with the context all the same
      }
      return status;
    } catch (e) {
      return code(e); // the function still runs, with the stream's error, as CUDA calls it
    }
  };
}

export const RUNS: Runs<'STREAM_SET_ATTR' | 'STREAM_GET_ATTR' | 'EVENT_ELAPSED' | 'HOST_FUNC' | 'CALLBACK_WAIT'> = {
  async STREAM_SET_ATTR(c) {
    const s = c.session.stream(c.args.stream);
    const { attr } = c.args;
    const value = streamAttrValue(attr, c.args.value, (p, n) => c.session.checkRange(p, n, 'access policy window'));
    await (await c.session.context(c.session.deviceOfHandle(c.args.stream))).streamSetAttribute(s, attr, value);
  },

  async STREAM_GET_ATTR(c) {
    const s = c.session.stream(c.args.stream);
    checkStreamAttr(c.args.attr);
    const v = await (await c.session.context(c.session.deviceOfHandle(c.args.stream))).streamGetAttribute(s, c.args.attr);
    if (v.length !== QCUDA_ATTR_VALUE_BYTES) throw new CudaError(CudaErr.Unknown, `the provider gave a ${v.length}-byte attribute value`);
    return { out: encode('qcuda_out_stream_attr_value', { value: v }) };
  },

  async EVENT_ELAPSED(c) {
    const a = c.session.event(c.args.start);
    const b = c.session.event(c.args.end);
    const ms = await (await c.session.context(c.session.deviceOfHandle(c.args.start))).eventElapsed(a, b);
    const f = new DataView(new ArrayBuffer(4));
    f.setFloat32(0, ms, true);
    return { out: encode('qcuda_out_event_elapsed', { ms_bits: f.getUint32(0, true) }) };
  },

  /**
   * Marks the point at once (later work on the stream waits for the
   * function); an event recorded there, once the stream's earlier gates are
   * open, says when the GPU gets to it.
   */
  async HOST_FUNC(c) {
    const h = c.args.stream;
    const stream = c.session.stream(h);
    const gate = c.session.callbacks.gate(h);
    const record = reachedAt(c, stream, c.session.deviceOfHandle(h));
    c.session.callbacks.mark(h, c.args.id, gate ? gate.then(record) : record());
  },

  async CALLBACK_WAIT(c) {
    const r = await c.session.callbacks.wait(c.args.done);
    return { out: encode('qcuda_out_callback', { id: r.id, status: r.status }) };
  },
};
