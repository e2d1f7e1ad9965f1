// A VM's ledger (limits.ts Ledger) as its processes lay it out: its budgets
// in order, its holder slots, and how `qcuda vm` shares one between the
// VM's qcuda backend and its GPU disks' backends, so that the disks take
// device memory from the same quota as the CUDA processes, as they are
// written (docs/gpu-sharing.md, "Memory shared live").
import { Budget, DEFAULT_LIMITS, Ledger, type VmLimits } from './limits';
import type { Fd } from '../../vhost-user';

/** Holder slots of a VM's ledger: one per session, those still closing included (virtio-device.ts allows 4096 open). */
export const LEDGER_SLOTS = 8192;

/** The limits of a VM's ledger, budget by budget (the Budgets of session.ts vmShared, in order; 0: unbounded). */
export function ledgerLimits(limits: VmLimits): bigint[] {
  return [limits.deviceMemory, limits.moduleStaging, BigInt(limits.contexts), BigInt(limits.hostMapPieces), 0n];
}

/** The VM's device memory quota (limits.deviceMemory) in its ledger. */
export function quotaBudget(ledger: Ledger): Budget {
  return new Budget(ledger, 0, 'the device memory quota');
}

/**
 * The ledger `qcuda vm` makes for a VM's backends to share (vm/runner.ts):
 * the qcuda backend's sessions hold slots [0, LEDGER_SLOTS), disk i slot
 * diskSlot(i). Its maker takes nothing, so its limits are none: each
 * backend opens it with its own (from its command line; a worker can write
 * the file, so no limit is read from it).
 */
export function vmLedger(disks: number): Ledger {
  return Ledger.create(
    ledgerLimits(DEFAULT_LIMITS).map(() => 0n),
    LEDGER_SLOTS + disks,
  );
}

export function diskSlot(disk: number): number {
  return LEDGER_SLOTS + disk;
}

/** The qcuda backend's side of a vmLedger inherited as fd: it hands out its sessions' slots. */
export function openVmLedger(fd: Fd, limits: VmLimits): Ledger {
  return Ledger.open(fd, ledgerLimits(limits), { from: 0, count: LEDGER_SLOTS });
}

/** A GPU disk backend's side: the quota it takes from (its own limit), through its one slot. */
export function openDiskLedger(fd: Fd, deviceMemory: bigint, slot: number): Ledger {
  if (slot < LEDGER_SLOTS) throw new RangeError(`ledger slot ${slot}: below ${LEDGER_SLOTS} they are the qcuda backend's`);
  return Ledger.open(fd, ledgerLimits({ ...DEFAULT_LIMITS, deviceMemory }), { from: slot, count: 1 });
}
