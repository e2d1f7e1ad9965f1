// Which commands the GPU share gate (gate.ts) stands before and after: those
// that put work on the GPU (declared gpu: 'posts', wire/protocol.ts) wait
// for their VM's turn; those that wait for work to finish end the process's
// busy time.
import { CALLS, type CallDecl } from '../wire/protocol';
import { QCUDA_BATCH_ENDS_SYNC } from '../proto';
import type { Call, Result } from '../command';
import { then, type Now } from '../../sys/now';
import type { ShareGate } from './gate';

const BATCH = (CALLS.BATCH as CallDecl).cmd;

/**
 * Whether the command, once it returns, has waited for the process's posted
 * work: a synchronize, or a batch ending in one (QCUDA_BATCH_ENDS_SYNC). A
 * batch ending in a query (QCUDA_BATCH_ENDS_QUERY) has not: the work it
 * posted may still be running, so the process stays busy.
 */
function syncs(d: CallDecl, c: Call): boolean {
  return d.syncs === true || (d.cmd === BATCH && ((c.args as { flags?: number }).flags ?? 0) === QCUDA_BATCH_ENDS_SYNC);
}

/** What must pass before the command runs under --gpu-share (undefined, the usual case: nothing). */
export function shareBefore(g: ShareGate | undefined, d: CallDecl): Promise<void> | undefined {
  return g?.before(d.gpu === 'posts') ?? undefined;
}

/** The command's result, once the gate knows whether it synchronized. */
export function shareAfter(g: ShareGate | undefined, d: CallDecl, c: Call, r: Now<Result>): Now<Result> {
  if (!g || !syncs(d, c)) return r;
  return then(r, (x) => {
    g.synced();
    return x;
  });
}
