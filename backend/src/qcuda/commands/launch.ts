// Kernel launches, sent on their own (LAUNCH, LAUNCH_COOPERATIVE) or posted
// in a batch (batch.ts): each checked the same way before the provider sees it.
import type { Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { decode, LAYOUT, QCUDA_LAUNCH_COOPERATIVE, QCUDA_MAX_CLUSTER_BLOCKS, Status, type Decoded } from '../proto';
import type { LaunchDesc } from '../provider';
import type { Session } from '../session/session';

/** Bytes of the launch arguments struct, after which its parameters follow. */
const LAUNCH_ARGS = LAYOUT.qcuda_args_launch.size;

function dims(d: Uint32Array, what: string): [number, number, number] {
  if (d.some((x) => x === 0)) throw new CudaError(CudaErr.InvalidConfiguration, `${what} dimensions ${d.join('x')}`);
  return [d[0], d[1], d[2]];
}

/**
 * A launch (its arguments a, then its parameter block), posted or not,
 * checked: the parameter bytes are what the header and the kernel say, no
 * dimension is 0, the function and the stream are the session's; then the
 * local memory the kernel makes the driver reserve is counted, or the
 * launch refused past the quota (Session.chargeLocal).
 */
function launchDesc(
  s: Session,
  a: Pick<Decoded<'qcuda_args_launch'>, 'func' | 'stream' | 'grid' | 'block' | 'shared_mem' | 'param_bytes'>,
  params: Uint8Array,
): LaunchDesc {
  if (params.length !== a.param_bytes)
    throw new CudaError(Status.BAD_REQUEST, `LAUNCH: ${params.length} parameter bytes, param_bytes says ${a.param_bytes}`);
  const f = s.modules.func(a.func);
  if (params.length !== f.paramBytes)
    throw new CudaError(CudaErr.InvalidValue, `${params.length} parameter bytes for a kernel taking ${f.paramBytes}`);
  const l: LaunchDesc = {
    f: f.ref,
    grid: dims(a.grid, 'grid'),
    block: dims(a.block, 'block'),
    sharedMem: a.shared_mem,
    stream: s.stream(a.stream),
    params,
  };
  s.chargeLocal(f.localBytes);
  return l;
}

/** A posted launch's bytes (the struct, then the parameters), checked as LAUNCH checks them. */
export function postedLaunch(s: Session, bytes: Uint8Array): LaunchDesc {
  return launchDesc(s, decode('qcuda_args_launch', bytes.subarray(0, LAUNCH_ARGS)), bytes.subarray(LAUNCH_ARGS));
}

/** Clusters of at most this many blocks (the wire's constant, which the ring server checks too). */
export const MAX_CLUSTER_BLOCKS = QCUDA_MAX_CLUSTER_BLOCKS;

/** LAUNCH_EX's cluster shape, checked as far as it is the guest's business: no dimension 0, not larger than any GPU takes. */
function clusterOf(a: Decoded<'qcuda_args_launch_ex'>): [number, number, number] {
  const c = dims(a.cluster, 'cluster');
  if (c[0] * c[1] * c[2] > MAX_CLUSTER_BLOCKS) throw new CudaError(CudaErr.InvalidValue, `a cluster of ${c.join('x')} blocks`);
  if (a.flags & ~QCUDA_LAUNCH_COOPERATIVE) throw new CudaError(Status.BAD_REQUEST, `LAUNCH_EX flags 0x${a.flags.toString(16)}`);
  return c;
}

export const RUNS: Runs<'LAUNCH' | 'LAUNCH_COOPERATIVE' | 'LAUNCH_EX'> = {
  LAUNCH(c) {
    const l = launchDesc(c.session, c.args, c.extra);
    return c.session.withContext((x) => x.launch(l.f, l.grid, l.block, l.sharedMem, l.stream, l.params));
  },
  async LAUNCH_COOPERATIVE(c) {
    const l = launchDesc(c.session, c.args, c.extra);
    await (await c.session.context()).launchCooperative(l.f, l.grid, l.block, l.sharedMem, l.stream, l.params);
  },
  async LAUNCH_EX(c) {
    const cluster = clusterOf(c.args);
    const l = launchDesc(c.session, c.args, c.extra);
    await (
      await c.session.context()
    ).launchEx(l.f, l.grid, l.block, l.sharedMem, l.stream, l.params, cluster, (c.args.flags & QCUDA_LAUNCH_COOPERATIVE) !== 0);
  },
};
