// Who may connect (security review 2, L6): with a peer uid, the backend
// serves only a frontend whose process runs as that user (SO_PEERCRED), logs
// and closes anyone else's connection and keeps listening; the status socket
// answers only root, its own user and the peer uid. The other user is a real
// process of uid 65534 (so these need root to run).
import test from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { EchoDevice } from '../../backend/src/devices/echo';
import { readStatus, StatusSocket } from '../../backend/src/sys/status-socket';
import { VhostUserServer } from '../../backend/src/vhost-user';
import { Frontend } from '../../backend/src/vhost-user/frontend';
import { tmpDir } from '../helpers';

const NOBODY = 65534;
const asRoot = process.getuid?.() === 0 ? test : test.skip;

/** GET_FEATURES, version 1: a frontend's first message. */
const GET_FEATURES = [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];

interface Outcome {
  pid: number;
  /** answered: `want` bytes came; closed/an errno: the backend hung up first. */
  how: string;
  bytes: number;
}

/**
 * A process of uid 65534 connects to dir/name (it starts in dir, so that no
 * directory above has to be open to it), sends `send`, and says what came
 * back: `want` bytes, or a hang-up.
 */
function connectAsNobody(dir: string, name: string, send: number[], want: number): Promise<Outcome> {
  const script = `
    const c = require('net').connect(${JSON.stringify(name)});
    let bytes = 0;
    const done = (how) => { process.stdout.write(JSON.stringify({ how, bytes })); process.exit(0); };
    c.on('connect', () => c.write(Buffer.from(${JSON.stringify(send)})));
    c.on('data', (d) => { bytes += d.length; if (${want} > 0 && bytes >= ${want}) done('answered'); });
    c.on('close', () => done('closed'));
    c.on('error', (e) => done(e.code));
    setTimeout(() => done('timeout'), 5000);`;
  const child = spawn(process.execPath, ['-e', script], { uid: NOBODY, gid: NOBODY, cwd: dir, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', () => {
      try {
        resolve({ pid: child.pid!, ...(JSON.parse(out) as { how: string; bytes: number }) });
      } catch {
        reject(new Error(`the uid ${NOBODY} client said '${out}'`));
      }
    }),
  );
}

/** A directory that uid 65534 can enter (not list), with a vhost-user socket in it that everyone may open. */
function openDir(t: import('ava').ExecutionContext): string {
  const dir = tmpDir(t);
  fs.chmodSync(dir, 0o711);
  return dir;
}

function listen(t: import('ava').ExecutionContext, dir: string, uid: number): { server: VhostUserServer; logged: string[] } {
  const logged: string[] = [];
  const server = VhostUserServer.listen(path.join(dir, 'vhost.sock'), new EchoDevice(), {
    logger: { error: (l) => logged.push(l) },
    peer: { uid },
  });
  t.teardown(() => server.close());
  fs.chmodSync(path.join(dir, 'vhost.sock'), 0o777); // the file's mode lets anyone in: the uid check must not
  return { server, logged };
}

asRoot(
  '--peer-uid: a frontend of another user is refused, its pid and uid logged, and the backend then serves the right one',
  async (t) => {
    const dir = openDir(t);
    const { server, logged } = listen(t, dir, process.getuid!());
    const other = await connectAsNobody(dir, 'vhost.sock', GET_FEATURES, 20);
    t.is(other.bytes, 0, `no answer for uid ${NOBODY} (${other.how})`);
    t.not(other.how, 'timeout', 'its connection was closed');
    t.deepEqual(logged, [
      `vhost-user: echo: refused a frontend: pid ${other.pid} runs as uid ${NOBODY}, not ${process.getuid!()} (--peer-uid)`,
    ]);
    t.false(server.connected);
    const fe = Frontend.connect(path.join(dir, 'vhost.sock'));
    t.teardown(() => fe.close());
    await fe.negotiate();
    t.true(server.connected, 'the allowed user is served after the refusal');
  },
);

asRoot("--peer-uid: a frontend of that user, another process than the backend's, is served", async (t) => {
  const dir = openDir(t);
  const { logged } = listen(t, dir, NOBODY);
  const peer = await connectAsNobody(dir, 'vhost.sock', GET_FEATURES, 20);
  t.deepEqual([peer.how, peer.bytes], ['answered', 20], 'GET_FEATURES answered');
  t.deepEqual(logged, []);
});

asRoot('the status socket answers root and its own user, and another user only where it is the peer uid', async (t) => {
  for (const uids of [[], [NOBODY]]) {
    const dir = openDir(t);
    const at = path.join(dir, 'vhost.sock.status');
    const refused: string[] = [];
    const s = await StatusSocket.listen(at, () => ({ sessions: 3 }), { uids, refused: (l) => refused.push(l) });
    t.teardown(() => s.close());
    fs.chmodSync(at, 0o666); // as if the mode were widened: the credentials check still holds
    t.deepEqual(await readStatus(at), { sessions: 3 }, 'root is answered');
    const other = await connectAsNobody(dir, 'vhost.sock.status', [], 0);
    if (uids.length === 0) {
      t.is(other.bytes, 0, `uid ${NOBODY} gets nothing`);
      t.deepEqual(refused, [`status socket ${at}: refused pid ${other.pid} (uid ${NOBODY})`]);
    } else {
      t.is(other.bytes, '{"sessions":3}\n'.length, `uid ${NOBODY}, the peer uid, gets the document`);
      t.deepEqual(refused, []);
    }
  }
});
