// Pipes for the state transfer, as QEMU makes them (g_unix_open_pipe). Node
// has no pipe(2); a FIFO opened at both ends and unlinked is the same object.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface Pipe {
  read: number;
  write: number;
}

export function openPipe(): Pipe {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vhost-user-pipe-'));
  const fifo = path.join(dir, 'p');
  try {
    execFileSync('mkfifo', ['-m', '600', fifo]);
    const read = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    const write = fs.openSync(fifo, fs.constants.O_WRONLY);
    return { read, write };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Everything up to the end of the stream (every write end closed); the fd is closed. */
export function readToEnd(fd: number): Promise<Buffer> {
  const sock = new net.Socket({ fd, readable: true, writable: false });
  const chunks: Buffer[] = [];
  return new Promise((resolve, reject) => {
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('end', () => {
      sock.destroy();
      resolve(Buffer.concat(chunks));
    });
    sock.on('error', (e) => {
      sock.destroy();
      reject(e);
    });
  });
}

/** Writes data (waiting while the pipe is full) and closes the fd. */
export function writeAndClose(fd: number, data: Uint8Array): Promise<void> {
  const sock = new net.Socket({ fd, readable: false, writable: true });
  return new Promise((resolve, reject) => {
    sock.on('error', (e) => {
      sock.destroy();
      reject(e);
    });
    sock.end(data, () => {
      sock.destroy();
      resolve();
    });
  });
}
