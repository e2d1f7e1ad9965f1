// Shared by the VM test files: the QEMU, kernel and image they boot, and
// reading a guest script's output and the backend's status at its marks.
import fs from 'node:fs';
import path from 'node:path';
import { readStatus } from '../../backend/src/sys/status-socket';
import type { BackendStatus } from '../../backend/src/cli/status';
import type { QcudaStatus } from '../../backend/src/qcuda/status';
import type { VmOptions } from '../../backend/src/vm/runner';

const env = { qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD };
const missing = Object.entries(env)
  .filter(([, v]) => !v || !fs.existsSync(v))
  .map(([k]) => k);
if (missing.length > 0) {
  // Run through `make test`, which builds QEMU and the image and sets these.
  throw new Error(`VM tests need QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (missing: ${missing.join(', ')}); run them with 'make test'`);
}
export const base = { qemu: env.qemu!, kernel: env.kernel!, initrd: env.initrd!, timeoutMs: 180_000 };

// A section of a guest script's stdout: what follows "=== name\n" up to the next "=== ".
export function section(stdout: string, name: string): string {
  return stdout.split(`=== ${name}\n`)[1]?.split('\n=== ')[0] ?? '';
}

/**
 * The backend's status, read as the guest prints "=== snapshot LABEL" (the
 * label may be empty), by label: pass onStarted and onConsole to runVm.
 */
export function statusAtMarks(): {
  snaps: Map<string, Promise<QcudaStatus>>;
  onStarted: (i: { dir: string }) => void;
  onConsole: (s: string) => void;
} {
  let dir: string | undefined;
  let seen = '';
  const snaps = new Map<string, Promise<QcudaStatus>>();
  return {
    snaps,
    onStarted: (i) => (dir = i.dir),
    onConsole: (s) => {
      seen += s;
      if (!dir) return;
      // Whole lines only: a mark may come in two pieces of console output.
      for (const m of seen.matchAll(/^=== snapshot ?(\S*)\r?\n/gm)) {
        if (snaps.has(m[1])) continue;
        snaps.set(
          m[1],
          readStatus(path.join(dir, 'vhost.sock.status')).then((d) => (d as BackendStatus).status as QcudaStatus),
        );
      }
    },
  };
}

/** Calls act(monitor) once the console shows `mark`. */
export function onMark(
  mark: string,
  act: (monitor: string) => Promise<void>,
): Pick<VmOptions, 'onStarted' | 'onConsole'> & { done: Promise<void> } {
  let monitor: string | undefined;
  let seen = '';
  let fire: () => void;
  const go = new Promise<void>((r) => (fire = r));
  let fired = false;
  return {
    onStarted: (i) => (monitor = i.monitor),
    onConsole: (s) => {
      seen += s;
      if (!fired && seen.includes(mark)) {
        fired = true;
        fire();
      }
    },
    done: go.then(() => act(monitor!)),
  };
}
