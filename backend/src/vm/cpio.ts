// A newc ("070701") cpio writer: the runner appends one such archive to the
// base initramfs to give the guest its command and files (Linux unpacks
// concatenated archives in order).
const TRAILER = 'TRAILER!!!';

export interface CpioEntry {
  /** Path inside the archive, without a leading slash. */
  name: string;
  /** Absent for directories. */
  data?: Uint8Array;
  mode: number; // permission bits
}

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;

function pad4(n: number): number {
  return (4 - (n % 4)) % 4;
}

function header(name: string, mode: number, size: number, ino: number): Buffer {
  const hex = (v: number) => v.toString(16).padStart(8, '0');
  const fields = [ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, name.length + 1, 0];
  const h = `070701${fields.map(hex).join('')}`;
  const nameBytes = Buffer.from(`${name}\0`);
  return Buffer.concat([Buffer.from(h), nameBytes, Buffer.alloc(pad4(h.length + nameBytes.length))]);
}

/** Builds the archive; parent directories of every entry are created first. */
export function cpio(entries: CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const dirs = new Set<string>();
  let ino = 1;
  const addDir = (dir: string) => {
    if (dir === '' || dir === '.' || dirs.has(dir)) return;
    addDir(dir.slice(0, Math.max(0, dir.lastIndexOf('/'))));
    dirs.add(dir);
    parts.push(header(dir, S_IFDIR | 0o755, 0, ino++));
  };
  for (const e of entries) {
    if (e.name.startsWith('/') || e.name.split('/').includes('..')) throw new Error(`bad cpio path: ${e.name}`);
    addDir(e.name.slice(0, Math.max(0, e.name.lastIndexOf('/'))));
    if (!e.data) {
      addDir(e.name);
      continue;
    }
    parts.push(header(e.name, S_IFREG | (e.mode & 0o7777), e.data.length, ino++), Buffer.from(e.data), Buffer.alloc(pad4(e.data.length)));
  }
  parts.push(header(TRAILER, 0, 0, 0));
  return Buffer.concat(parts);
}
