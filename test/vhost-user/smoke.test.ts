import test from 'ava';
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { EchoDevice } from '../../backend/src/devices/echo';
import { VhostUserServer } from '../../backend/src/vhost-user';
import { Frontend } from '../../backend/src/vhost-user/frontend/frontend';

test('echo round trip', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-'));
  const sock = path.join(dir, 's');
  const server = VhostUserServer.listen(sock, new EchoDevice());
  const fe = Frontend.connect(sock);
  await fe.negotiate();
  await fe.start({ size: 64 });
  const inp = fe.mem.alloc(100);
  const out = fe.mem.alloc(200);
  fe.mem.bytes(inp, 100).set(Buffer.from('x'.repeat(100)));
  const u = await fe.submit(1, [{ gpa: inp, len: 100 }, { gpa: out, len: 200, write: true }]);
  t.is(u.len, 108);
  t.is(Buffer.from(fe.mem.bytes(out, 100)).toString(), 'x'.repeat(100));
  t.deepEqual(await fe.stop(), [0, 1, 0, 0]);
  fe.close();
  server.close();
  fs.rmSync(dir, { recursive: true });
});
