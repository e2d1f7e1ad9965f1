// A context's per-thread local memory, as the VM's quota counts it
// (security review 3, N3). The driver keeps one local memory reservation
// per context, the same size for every thread the device holds at once
// (attrs.ts residentThreads): the stack limit (cudaLimitStackSize) is that
// size, and a launch of a kernel needing more per thread
// (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) grows it to what the kernel needs and
// keeps it (cuCtxSetLimit's documentation: "The driver automatically
// increases the per-thread stack size for each kernel launch as needed. This
// size isn't reset back to the original value after each launch"; H100: a
// 1-thread launch needing 16 KiB took (16 KiB - the 1 KiB default) x
// 270,336 threads, and each larger kernel after it only the difference).
// So the stack limit and kernels' local memory are one reservation, of the
// larger of the two, and what it holds beyond the context's default (its
// overhead already counts that) is one charge: localReservationBytes.
//
// A stack limit set lower after such a launch leaves the count at what the
// launch grew it to: the driver may keep the memory then (not measured), and
// a count that went down with the limit could let the memory be allocated
// twice. The count is never below what the driver may hold.
import { localReservationBytes } from '../attrs';

export class LocalMemory {
  /**
   * base: the stack limit of a fresh context (context overhead);
   * threads: the device's resident threads; stack: the stack limit set;
   * launched: the most local memory per thread a launched kernel needed.
   */
  constructor(
    readonly base: bigint,
    readonly threads: bigint,
    readonly stack: bigint = base,
    readonly launched: bigint = 0n,
  ) {}

  /** Bytes per thread the context holds. */
  get perThread(): bigint {
    const m = this.stack > this.launched ? this.stack : this.launched;
    return m > this.base ? m : this.base;
  }

  /** Device memory it holds beyond the context's default: what the quota counts. */
  get bytes(): bigint {
    return localReservationBytes(this.perThread, this.base, this.threads);
  }

  /** After a launch of a kernel needing local bytes a thread: undefined where the context holds that much already. */
  afterLaunch(local: bigint): LocalMemory | undefined {
    return local > this.perThread ? new LocalMemory(this.base, this.threads, this.stack, local) : undefined;
  }

  /** After the stack limit is set to value. */
  withStack(value: bigint): LocalMemory {
    return new LocalMemory(this.base, this.threads, value, this.launched);
  }
}
