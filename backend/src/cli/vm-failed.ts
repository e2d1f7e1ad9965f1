// How `qcuda vm` ends when its VM did not run to the end, Linux guest or
// Windows: one place, so that both say it alike and exit alike.
import { VmConfigError, VmError } from '../vm/runner';

/**
 * What `qcuda vm` makes of an error from its VM: options the VM cannot take
 * (VmConfigError) are a usage error; a VM that failed (VmError) is one line
 * naming the side that failed and status 125, as `docker run` answers its
 * own failures, apart from any status the guest's command could give.
 * Anything else is a bug and is thrown on.
 */
export function vmFailed(e: unknown, usage: (msg: string) => never): number {
  if (e instanceof VmConfigError) usage(e.message);
  if (e instanceof VmError) {
    process.stderr.write(`qcuda: VM failed (${e.side}): ${e.message}\n`);
    return 125;
  }
  throw e;
}
