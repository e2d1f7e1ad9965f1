// What runVm does for snapshots and migration, over QEMU's QMP: it holds
// one monitor of its own (the other, `monitor`, is for `qcuda migrate` and
// people), resumes a VM that came in (-incoming), saves the VM to a file on
// a signal, and tells a VM that migrated away from one that just stopped.
import fs from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { migrateVm, Qmp, resumeIncoming, setReturnPath, type QmpEvent } from './qmp';

export interface VmMigrationOptions {
  /**
   * Wait for the VM's state from this migration URI instead of booting it
   * ("unix:PATH", "tcp:HOST:PORT", "file:PATH" for a saved VM, "exec:CMD"):
   * QEMU's -incoming, resumed once it has come in.
   */
  incoming?: string;
  /** Save the VM into this file on `saveSignal` (it then goes on running). */
  saveFile?: string;
  /** Default SIGUSR2 (Node keeps SIGUSR1 for its inspector). */
  saveSignal?: NodeJS.Signals;
  /** Where the second QMP monitor listens (qcuda migrate --monitor=PATH); default DIR/monitor.sock. */
  monitorSocket?: string;
  /** Receives one line for each save or incoming migration (done or failed). */
  onMigration?: (line: string) => void;
}

export class VmControl {
  /** The last MIGRATION status QEMU announced ("completed": the VM's state left, it may have moved). */
  lastStatus: string | undefined;
  /** A failed incoming migration or resume (QEMU's reason). */
  incomingError: string | undefined;
  readonly #qmp: Qmp;
  readonly #off: (() => void)[] = [];

  private constructor(qmp: Qmp) {
    this.#qmp = qmp;
  }

  /** Connects to runVm's own monitor once QEMU listens on it; undefined if QEMU exited first. */
  static async attach(sock: string, qemu: ChildProcess, o: VmMigrationOptions): Promise<VmControl | undefined> {
    const end = Date.now() + 60_000;
    while (!fs.existsSync(sock)) {
      if (qemu.exitCode !== null || qemu.signalCode !== null || Date.now() > end) return undefined;
      await new Promise((r) => setTimeout(r, 20));
    }
    let qmp: Qmp;
    try {
      qmp = await Qmp.connect(sock);
    } catch {
      return undefined;
    }
    const c = new VmControl(qmp);
    c.#off.push(qmp.onEvent((e: QmpEvent) => c.#onEvent(e)));
    if (o.incoming) {
      // QEMU waits (-incoming defer) until the return path is set as the source's.
      const uri = o.incoming;
      setReturnPath(qmp, uri)
        .then(() => qmp.execute('migrate-incoming', { uri }))
        .then(() => resumeIncoming(qmp))
        .then(
          () => {
            o.onMigration?.(`the VM came in from ${o.incoming} and runs`);
            return c.#events();
          },
          (e: Error) => {
            c.incomingError = e.message;
            o.onMigration?.(`the incoming migration from ${o.incoming} failed: ${e.message}`);
          },
        );
    } else await c.#events();
    if (o.saveFile) {
      const file = o.saveFile;
      const sig = o.saveSignal ?? 'SIGUSR2';
      const onSig = () => {
        c.save(file).then(
          (line) => o.onMigration?.(line),
          (e: Error) => o.onMigration?.(`saving the VM to ${file} failed: ${e.message}`),
        );
      };
      process.on(sig, onSig);
      c.#off.push(() => process.off(sig, onSig));
    }
    return c;
  }

  /**
   * A migration someone else asked for (the monitor) that completed leaves
   * the VM's state there: QEMU waits in postmigrate, so it is ended here
   * (runVm then returns migrated). A save of runVm's own goes on running.
   */
  #onEvent(e: QmpEvent): void {
    if (e.event !== 'MIGRATION') return;
    this.lastStatus = String(e.data?.status);
    if (this.lastStatus !== 'completed' || this.#saving) return;
    setTimeout(() => {
      this.#qmp
        .execute<{ status: string }>('query-status')
        .then((s) => (s.status === 'postmigrate' ? this.#qmp.execute('quit') : undefined))
        .catch(() => {});
    }, 200);
  }

  #saving = false;

  /** MIGRATION events (QEMU sends them only with the "events" capability on). */
  async #events(): Promise<void> {
    await this.#qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'events', state: true }] }).catch(() => {});
  }

  /** Saves the VM into file (stopped for the copy, then running again); one line saying so. */
  async save(file: string): Promise<string> {
    if (this.#saving) throw new Error('a save is under way');
    this.#saving = true;
    let r;
    try {
      r = await migrateVm(this.#qmp, `file:${file}`, { resume: true });
    } finally {
      this.#saving = false;
    }
    return `saved the VM to ${file} (${fs.statSync(file).size} bytes; the guest paused ${r.pausedMs} ms)`;
  }

  /** The VM's state left for another QEMU (migrated, not a snapshot): QEMU then waits in postmigrate. */
  async migratedAway(): Promise<boolean> {
    if (this.lastStatus !== 'completed') return false;
    try {
      const s = await this.#qmp.execute<{ status: string }>('query-status');
      return s.status === 'postmigrate';
    } catch {
      return true; // QEMU quit after the migration completed (qcuda migrate does)
    }
  }

  close(): void {
    for (const off of this.#off.splice(0)) off();
    this.#qmp.close();
  }
}
