// The qcuda device through the test frontend: config space, NOP on every
// queue, and refusals of malformed requests.
import test from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/device';
import * as P from '../../backend/src/qcuda/proto';
import type { Frontend } from '../../backend/src/vhost-user/frontend/frontend';
import { started } from '../helpers';

function reqHdr(cmd: number, len: number): Uint8Array {
  const b = new Uint8Array(P.ReqHdr.size);
  const v = new DataView(b.buffer);
  v.setUint32(P.ReqHdr.cmd, cmd, true);
  v.setUint32(P.ReqHdr.len, len, true);
  return b;
}

async function send(fe: Frontend, q: number, req: Uint8Array, outLen: number) {
  const inp = fe.mem.alloc(req.length);
  const out = fe.mem.alloc(Math.max(outLen, P.RespHdr.size));
  fe.mem.bytes(inp, req.length).set(req);
  const u = await fe.submit(q, [{ gpa: inp, len: req.length }, { gpa: out, len: outLen, write: true }]);
  const bytes = fe.mem.bytes(out, Math.max(outLen, P.RespHdr.size));
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  return { used: u.len, status: v.getUint32(P.RespHdr.status, true), len: v.getUint32(P.RespHdr.len, true), value: v.getBigUint64(P.RespHdr.value, true), bytes };
}

test('config space carries magic, version and queue count', async (t) => {
  const { fe } = await started(t, new QcudaDevice({ queues: 3 }), { size: 16 });
  const cfg = new DataView((await fe.getConfig(0, P.QCUDA_CONFIG_SIZE)).slice().buffer);
  t.is(cfg.getUint32(P.ConfigLayout.magic, true), P.QCUDA_MAGIC);
  t.is(cfg.getUint32(P.ConfigLayout.proto_version, true), P.QCUDA_PROTO_VERSION);
  t.is(cfg.getUint32(P.ConfigLayout.num_queues, true), 3);
});

test('NOP echoes its payload and names the queue on every queue', async (t) => {
  const dev = new QcudaDevice({ queues: 4 });
  const { fe } = await started(t, dev, { size: 16 });
  for (let q = 0; q < 4; q++) {
    const cookie = new Uint8Array([q, 1, 2, 3, 4, 5, 6, 0xff]);
    const r = await send(fe, q, new Uint8Array([...reqHdr(P.Cmd.NOP, 8), ...cookie]), P.RespHdr.size + 8);
    t.is(r.status, P.Status.OK);
    t.is(r.value, BigInt(q));
    t.is(r.len, 8);
    t.is(r.used, P.RespHdr.size + 8);
    t.deepEqual(Array.from(r.bytes.subarray(P.RespHdr.size)), Array.from(cookie));
  }
  t.deepEqual(dev.served, [1, 1, 1, 1]);
});

test('malformed requests get error statuses', async (t) => {
  const { fe } = await started(t, new QcudaDevice({ queues: 1 }), { size: 16 });
  t.is((await send(fe, 0, new Uint8Array(8), 64)).status, P.Status.BAD_REQUEST, 'short header');
  t.is((await send(fe, 0, reqHdr(P.Cmd.NOP, 100), 64)).status, P.Status.BAD_REQUEST, 'length lies');
  t.is((await send(fe, 0, reqHdr(999, 0), 64)).status, P.Status.UNKNOWN_CMD);
  t.is((await send(fe, 0, new Uint8Array([...reqHdr(P.Cmd.NOP, 32), ...new Uint8Array(32)]), 20)).status, P.Status.TOO_LARGE, 'no room for the echo');
  t.is((await send(fe, 0, reqHdr(P.Cmd.NOP, 0), 8)).used, 0, 'no room for a reply header: the request fails');
});
