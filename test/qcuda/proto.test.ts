// The C header is the protocol's source of truth: compile it, read its
// layout, and check the TypeScript mirror against every id, size and offset.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import * as P from '../../backend/src/qcuda/proto';
import { tmpDir } from '../helpers';

const root = path.resolve(__dirname, '..', '..', '..');

test('TypeScript and C agree on the wire protocol', (t) => {
  const exe = path.join(tmpDir(t), 'proto-layout');
  execFileSync('gcc', ['-Wall', '-Werror', '-I', path.join(root, 'guest-driver/include'), '-o', exe, path.join(root, 'test/qcuda/proto-layout.c')]);
  const c = JSON.parse(execFileSync(exe, { encoding: 'utf8' })) as Record<string, number>;
  t.is(c.virtio_qcuda_config, P.QCUDA_CONFIG_SIZE);
  for (const [f, off] of Object.entries(P.ConfigLayout)) t.is(c[`virtio_qcuda_config.${f}`], off, f);
  t.is(c.qcuda_req_hdr, P.ReqHdr.size);
  t.is(c.qcuda_resp_hdr, P.RespHdr.size);
  for (const f of ['cmd', 'len', 'session'] as const) t.is(c[`qcuda_req_hdr.${f}`], P.ReqHdr[f], f);
  for (const f of ['status', 'len', 'value'] as const) t.is(c[`qcuda_resp_hdr.${f}`], P.RespHdr[f], f);
  t.is(c.VIRTIO_ID_QCUDA, P.VIRTIO_ID_QCUDA);
  t.is(c.QCUDA_MAGIC, P.QCUDA_MAGIC);
  t.is(c.QCUDA_PROTO_VERSION, P.QCUDA_PROTO_VERSION);
  t.is(c.QCUDA_CONFIG_SIZE, P.QCUDA_CONFIG_SIZE);
  t.is(BigInt(c.QCUDA_CAP_GPU), P.QCUDA_CAP_GPU);
  t.is(c.QCUDA_CMD_NOP, P.Cmd.NOP);
  t.is(c.QCUDA_ST_BAD_REQUEST, P.Status.BAD_REQUEST);
  t.is(c.QCUDA_ST_UNKNOWN_CMD, P.Status.UNKNOWN_CMD);
  t.is(c.QCUDA_ST_TOO_LARGE, P.Status.TOO_LARGE);
});
