// Where `qcuda vm --disk` keeps a disk whose store is not named: in GPU
// memory where a GPU answers, else in host memory, as --provider=auto picks
// for the CUDA device; a disk that names store=gpu where no GPU answers is
// refused before anything starts (its backend would fail only once QEMU's
// run was under way).
import type { VmDisk } from '../vm/runner';

export interface Probe {
  ok: boolean;
  reason: string;
}

/**
 * Fills in each disk's store (a disk of an outside backend, socket=, keeps
 * its own). Returns the lines to say (one per disk whose store was chosen
 * here); throws with a one-line message for store=gpu without a GPU. probe
 * is asked at most once, and only if a disk needs it.
 */
export function chooseDiskStores(disks: VmDisk[], probe: () => Probe): string[] {
  let answer: Probe | undefined;
  const gpu = () => (answer ??= probe());
  const said: string[] = [];
  disks.forEach((d, i) => {
    if (d.socket) return;
    if (d.store === 'gpu' && !gpu().ok)
      throw new Error(`--disk ${i}: store=gpu, but no GPU answers here (${gpu().reason}); use store=host`);
    if (d.store !== undefined) return;
    d.store = gpu().ok ? 'gpu' : 'host';
    said.push(d.store === 'gpu' ? `disk ${i}: in GPU memory` : `disk ${i}: in host memory: no GPU (${gpu().reason})`);
  });
  return said;
}
