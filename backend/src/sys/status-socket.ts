// A unix socket that answers each connection with one JSON document (what
// the process holds now) and closes it: `qcuda status` reads it. Nothing is
// read from the client, so a client cannot make the process do more than
// serialize the document. Only the process's own user (and root) may
// connect: the socket is 0600 from its creation, since what a VM holds is
// nobody else's business (security review 2, L6). Each connection's
// credentials (SO_PEERCRED) are checked as well, against root, this
// process's user and the VM's QEMU user (--peer-uid): the file's mode is one
// chmod or ACL away from letting in more.
import fs from 'node:fs';
import net from 'node:net';
import { native } from './native';

export interface StatusPeers {
  /** Users allowed besides root and this process's own. */
  uids?: number[];
  /** Where a refusal is said (one line); default stderr. */
  refused?: (line: string) => void;
}

/** bigints (byte counts, addresses) as numbers: JSON has no bigint, and these stay below 2^53. */
function replacer(_key: string, v: unknown): unknown {
  return typeof v === 'bigint' ? Number(v) : v;
}

export class StatusSocket {
  private constructor(
    readonly path: string,
    readonly server: net.Server,
  ) {}

  /** Listens on path (an old socket file there is replaced); each client gets doc() as one line of JSON. */
  static listen(path: string, doc: () => unknown, peers: StatusPeers = {}): Promise<StatusSocket> {
    if (fs.lstatSync(path, { throwIfNoEntry: false })?.isSocket()) fs.unlinkSync(path);
    const allowed = new Set([0, process.geteuid!(), ...(peers.uids ?? [])]);
    const refused = peers.refused ?? ((line: string) => void process.stderr.write(`${line}\n`));
    const server = net.createServer((c) => {
      c.on('error', () => undefined); // a client that left early
      const why = stranger(c, allowed);
      if (why) {
        refused(`status socket ${path}: refused ${why}`);
        c.destroy();
        return;
      }
      c.end(`${JSON.stringify(doc(), replacer)}\n`);
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      // bind() happens within listen(): the file is made 0600, never wider.
      const umask = process.umask(0o177);
      try {
        server.listen(path, () => {
          server.off('error', reject);
          // A status socket must never keep the process alive by itself.
          server.unref();
          resolve(new StatusSocket(path, server));
        });
      } finally {
        process.umask(umask);
      }
    });
  }

  close(): void {
    this.server.close();
    fs.rmSync(this.path, { force: true });
  }
}

/** Why the client of c may not have the document (its pid and uid), or undefined where it may. */
function stranger(c: net.Socket, allowed: Set<number>): string | undefined {
  // node keeps a unix socket's fd on its handle, and has no call for SO_PEERCRED.
  const fd = (c as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (fd === undefined || fd < 0) return 'a client whose fd cannot be found';
  try {
    const who = native.peerCred(fd);
    return allowed.has(who.uid) ? undefined : `pid ${who.pid} (uid ${who.uid})`;
  } catch (e) {
    return `a client whose credentials cannot be read: ${(e as Error).message}`;
  }
}

/** Reads the document a StatusSocket serves (the client side: qcuda status). */
export function readStatus(path: string, timeoutMs = 5000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const c = net.connect(path);
    let text = '';
    const timer = setTimeout(() => c.destroy(new Error(`no answer from ${path} within ${timeoutMs} ms`)), timeoutMs);
    c.setEncoding('utf8');
    c.on('data', (d: string) => (text += d));
    c.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    c.on('end', () => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(text));
      } catch (e) {
        reject(new Error(`${path} did not answer a status document: ${(e as Error).message}`));
      }
    });
  });
}
