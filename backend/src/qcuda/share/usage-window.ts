// What `qcuda status` says of a VM's GPU share (issue 36): its part of the
// GPU time that the VMs in the table used over the last WINDOW_NS or so,
// against the part its weight asks for. The table keeps only totals (what
// each VM was charged since it joined), so the backend keeps a few samples
// of them: the part is the difference between now and the newest sample at
// least WINDOW_NS old (or the oldest, while the backend is younger than
// that). Samples are taken when status is asked for, at most one per
// SAMPLE_EVERY_NS, so a client asking in a loop keeps no more than about
// WINDOW_NS / SAMPLE_EVERY_NS of them.
import { clockNs, type ShareTable, type VmReport } from './table';

/** How far back the share is measured. */
export const WINDOW_NS = 10e9;
/** The closest two kept samples may be. */
const SAMPLE_EVERY_NS = 1e9;

/** This VM's GPU share as the status document has it. */
export interface GpuShareStatus {
  /** Its slot in the table. */
  slot: number;
  weight: number;
  /** Its part (0 to 1) of the GPU time the VMs in the table now used over the window; 0 where none was used. */
  share: number;
  /** The part its weight asks for: its weight over the weights of the VMs in the table now. */
  target: number;
  /** VMs in the table now, itself included. */
  vms: number;
  /** How far back the share was measured, seconds. */
  windowSeconds: number;
  /** GPU time it used over the window, ns, and all the VMs together. */
  usedNs: number;
  totalNs: number;
}

interface Sample {
  at: number;
  /** Each VM's usedNs, by slot and pid (a slot taken again is another VM, which started from 0). */
  used: Map<string, number>;
}

const key = (v: VmReport): string => `${v.slot}:${v.pid}`;

function sample(at: number, vms: readonly VmReport[]): Sample {
  return { at, used: new Map(vms.map((v) => [key(v), v.usedNs])) };
}

/** VM `slot`'s share between sample `from` and the VMs `now` (pure: the arithmetic). */
export function shareSince(slot: number, from: Sample, now: { at: number; vms: readonly VmReport[] }): GpuShareStatus | undefined {
  const me = now.vms.find((v) => v.slot === slot);
  if (!me) return undefined;
  const used = (v: VmReport): number => Math.max(0, v.usedNs - (from.used.get(key(v)) ?? 0));
  const totalNs = now.vms.reduce((n, v) => n + used(v), 0);
  const weights = now.vms.reduce((n, v) => n + v.weight, 0);
  return {
    slot,
    weight: me.weight,
    share: totalNs > 0 ? used(me) / totalNs : 0,
    target: me.weight / weights,
    vms: now.vms.length,
    windowSeconds: Math.round((now.at - from.at) / 1e9),
    usedNs: used(me),
    totalNs,
  };
}

export class UsageWindow {
  readonly #samples: Sample[];

  constructor(
    readonly table: ShareTable,
    readonly slot: number,
    readonly clock: () => number = clockNs,
  ) {
    this.#samples = [sample(clock(), table.report())];
  }

  /** This VM's share now (undefined where it is no longer in the table), keeping a sample for later calls. */
  status(): GpuShareStatus | undefined {
    const at = this.clock();
    const vms = this.table.report();
    // The newest sample at least WINDOW_NS old is the baseline; older ones are of no more use.
    let base = 0;
    while (base + 1 < this.#samples.length && this.#samples[base + 1].at <= at - WINDOW_NS) base++;
    this.#samples.splice(0, base);
    if (at - this.#samples[this.#samples.length - 1].at >= SAMPLE_EVERY_NS) this.#samples.push(sample(at, vms));
    return shareSince(this.slot, this.#samples[0], { at, vms });
  }
}
