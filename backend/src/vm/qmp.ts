// A QMP client (QEMU's JSON monitor on a unix socket) and what qcuda does
// with it: save a VM to a file, migrate it, resume an incoming one.
//
// The qcuda device migrates only a stopped VM (qemu-patches/0003: its
// backend does no dirty logging of guest memory), so a save or migration
// stops the VM, migrates, and on failure lets it go on where it was.
import net from 'node:net';

export class QmpError extends Error {
  override readonly name = 'QmpError';
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
}

export class Qmp {
  readonly #sock: net.Socket;
  readonly #pending: Pending[] = [];
  readonly #listeners = new Set<(e: QmpEvent) => void>();
  #buf = '';
  #closed: Error | undefined;

  private constructor(sock: net.Socket) {
    this.#sock = sock;
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => this.#onData(d));
    const end = (e?: Error) => {
      this.#closed ??= e ?? new QmpError('QMP connection closed');
      for (const p of this.#pending.splice(0)) p.reject(this.#closed);
    };
    sock.on('error', end);
    sock.on('close', () => end());
  }

  /** Connects and leaves capabilities negotiation mode. */
  static async connect(path: string, timeoutMs = 10_000): Promise<Qmp> {
    const sock = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect(path);
      const timer = setTimeout(() => {
        s.destroy();
        reject(new QmpError(`QMP ${path}: no connection in ${timeoutMs} ms`));
      }, timeoutMs);
      s.once('connect', () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once('error', (e) => {
        clearTimeout(timer);
        reject(new QmpError(`QMP ${path}: ${e.message}`));
      });
    });
    const q = new Qmp(sock);
    // The greeting comes first, as a reply to nothing: it takes the first slot.
    await new Promise((resolve, reject) => q.#pending.push({ resolve, reject }));
    await q.execute('qmp_capabilities');
    return q;
  }

  #onData(d: string): void {
    this.#buf += d;
    let nl;
    while ((nl = this.#buf.indexOf('\n')) >= 0) {
      const line = this.#buf.slice(0, nl).trim();
      this.#buf = this.#buf.slice(nl + 1);
      if (!line) continue;
      let msg: Record<string, unknown>;
      try {
        msg = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      if (typeof msg.event === 'string') {
        for (const l of this.#listeners) l(msg as unknown as QmpEvent);
        continue;
      }
      const p = this.#pending.shift();
      if (!p) continue;
      if (msg.error) {
        const err = msg.error as { desc?: string; class?: string };
        p.reject(new QmpError(err.desc ?? err.class ?? 'QMP error'));
      } else p.resolve(msg.return ?? msg.QMP);
    }
  }

  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ resolve: resolve as (v: unknown) => void, reject });
      this.#sock.write(`${JSON.stringify(args ? { execute: command, arguments: args } : { execute: command })}\n`);
    });
  }

  onEvent(l: (e: QmpEvent) => void): () => void {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }

  close(): void {
    this.#sock.destroy();
  }
}

export interface MigrationInfo {
  status?: string;
  'error-desc'?: string;
  'total-time'?: number;
  downtime?: number;
  ram?: { transferred?: number; total?: number };
}

/** Polls query-migrate until the migration is over; the last answer. */
export async function waitForMigration(q: Qmp, timeoutMs = 600_000): Promise<MigrationInfo> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const info = await q.execute<MigrationInfo>('query-migrate');
    if (info.status === 'completed' || info.status === 'failed' || info.status === 'cancelled') return info;
    if (Date.now() > end) {
      await q.execute('migrate_cancel').catch(() => {});
      throw new QmpError(`the migration did not finish in ${timeoutMs / 1000} s (status ${info.status})`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface MigrateResult {
  /** Milliseconds from stop to the end of the migration (the guest's pause). */
  pausedMs: number;
  bytes?: number;
}

/**
 * Stops the VM and migrates it to uri (a "unix:", "tcp:", "file:" or
 * "exec:" URI). Completed: the VM stays stopped (its state now lives
 * there) unless resume is set (a snapshot: it goes on here too). Failed:
 * it goes on running here, and the error says why (QEMU's words).
 */
export async function migrateVm(q: Qmp, uri: string, o: { resume?: boolean; timeoutMs?: number } = {}): Promise<MigrateResult> {
  const status = await q.execute<{ running: boolean; status: string }>('query-status');
  const wasRunning = status.running;
  const t0 = Date.now();
  if (wasRunning) await q.execute('stop');
  let info: MigrationInfo;
  try {
    await setReturnPath(q, uri);
    await q.execute('migrate', { uri });
    info = await waitForMigration(q, o.timeoutMs);
  } catch (e) {
    if (wasRunning) await q.execute('cont').catch(() => {});
    throw new QmpError(`migration to ${uri} failed: ${(e as Error).message}`);
  }
  const pausedMs = Date.now() - t0;
  if (info.status !== 'completed') {
    if (wasRunning) await q.execute('cont').catch(() => {});
    throw new QmpError(`migration to ${uri} ${info.status}: ${info['error-desc'] ?? 'QEMU gave no reason'}`);
  }
  if (o.resume && wasRunning) await q.execute('cont');
  return { pausedMs, bytes: info.ram?.transferred };
}

/**
 * Over a socket the destination says whether it took the state (QEMU's
 * return path, set on both sides): without it the source counts a
 * migration the destination refused (the device's state, say) as
 * completed, and would end a VM that lives nowhere. A file or a command
 * has no way back.
 */
export function hasReturnPath(uri: string): boolean {
  return /^(unix|tcp):/.test(uri);
}

export async function setReturnPath(q: Qmp, uri: string): Promise<void> {
  await q.execute('migrate-set-capabilities', { capabilities: [{ capability: 'return-path', state: hasReturnPath(uri) }] });
}

/** Waits for an incoming migration (-incoming) to end, then runs the VM; throws with QEMU's reason if it failed. */
export async function resumeIncoming(q: Qmp, timeoutMs = 600_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const s = await q.execute<{ running: boolean; status: string }>('query-status');
    if (s.running) return;
    if (s.status === 'paused' || s.status === 'postmigrate') {
      await q.execute('cont');
      return;
    }
    if (s.status !== 'inmigrate') throw new QmpError(`the incoming migration ended in state ${s.status}`);
    if (Date.now() > end) throw new QmpError(`no incoming migration in ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
