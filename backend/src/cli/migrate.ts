// qcuda migrate: moves a running `qcuda vm` (or any QEMU with the qcuda
// device and a QMP socket) to a QEMU waiting with -incoming, through its
// monitor: stop, migrate, quit once the state is there; on failure the VM
// goes on running here and the reason is said.
import { migrateVm, Qmp } from '../vm/qmp';

export async function migrateCommand(monitor: string, to: string, say: (line: string) => void): Promise<number> {
  let q: Qmp;
  try {
    q = await Qmp.connect(monitor);
  } catch (e) {
    say(`cannot reach the VM's monitor: ${(e as Error).message}`);
    return 1;
  }
  try {
    const r = await migrateVm(q, to);
    await q.execute('quit').catch(() => {});
    say(`migrated to ${to}: the guest paused ${r.pausedMs} ms, ${r.bytes ?? '?'} bytes of RAM sent`);
    return 0;
  } catch (e) {
    say(`${(e as Error).message}; the VM goes on running here`);
    return 1;
  } finally {
    q.close();
  }
}
