// Device-side printf and assert output on the cuda provider.
//
// The CUDA driver writes what kernels printf to the process's stdout and a
// line per failed device assert to its stderr, at the points CUDA flushes
// device output (synchronize, blocking copies, module load/unload, context
// destruction) and also from a thread of its own at other moments. The
// addon's capture (addon/src/cuda_output.h) takes fds 1 and 2 of the backend
// process over and hands that output here. The process's own stderr writes
// (process.stderr: console.error, debug, its log lines) are sent past the
// capture, straight to the real stderr, so that every line that does come
// through fd 2 is the driver's: all of it goes to a session, and none to the
// host's log as it is (a device assert's message is guest text, and may hold
// newlines: security review 2, L2). A line that is not an assert's is
// handed on as kind 3, which the session also logs, rate-limited and escaped.
//
// Which context printed is not known, so output is attributed:
//  - drained right after a flush point of a context that has launched a
//    kernel: to that context;
//  - otherwise (the driver's own thread, or a flush point of a context that
//    never launched, which cannot have printed): to the context that most
//    recently launched a kernel.
// With one CUDA process of a VM printing at a time this is exact. When several
// processes of ONE VM print at once, their output may be mixed up among them
// (never with another VM's: each VM has a backend process of its own). The
// backend therefore runs each session in a worker process of its own by
// default (isolated.ts), where this is exact: a worker has one context.
import createDebug from 'debug';
import type { CudaNative } from './native-cuda';
import type { OutputSink } from '../../provider';

const debug = createDebug('qcuda:output');

/** A context as the output router sees it. */
export interface OutputSource {
  /** Where its output goes (its session's queue); undefined: nowhere. */
  readonly output: OutputSink | undefined;
  /** It has launched a kernel: only such a context can print. */
  readonly launched: boolean;
}

class DeviceOutput {
  #n: CudaNative | undefined;
  #users = 0;
  /** Set during a drain: who gets what it brings. */
  #target: OutputSource | undefined;
  #lastLauncher: OutputSource | undefined;
  /** Puts process.stderr.write back as it was before acquire(). */
  #restoreStderr: (() => void) | undefined;

  /**
   * A provider starts using the capture (the first one starts it). False if
   * it cannot run: device output then goes to the backend's own stdout and
   * stderr, as without the capture, which is no reason to refuse the GPU.
   */
  acquire(n: CudaNative): boolean {
    if (this.#users > 0) {
      this.#users++;
      return true;
    }
    // Node's stdio streams are made now, on the real fds 1 and 2: made later,
    // on a capture pipe, libuv would set that pipe O_NONBLOCK, and the
    // driver's writes to it could then fail when it is full.
    void process.stdout;
    void process.stderr;
    try {
      n.outputStart((kind, bytes) => this.#deliver(kind, bytes));
    } catch (e) {
      console.error(`qcuda: device printf/assert output will not reach the guests: ${(e as Error).message}`);
      return false;
    }
    this.#n = n;
    this.#users = 1;
    this.#restoreStderr = ownStderrPast(n);
    return true;
  }

  /** A provider is done with it (the last one stops it: fds 1 and 2 go back). */
  release(): void {
    if (this.#users === 0 || --this.#users > 0) return;
    const n = this.#n;
    this.#n = undefined;
    this.#lastLauncher = undefined;
    this.#restoreStderr?.();
    this.#restoreStderr = undefined;
    n?.outputStop();
  }

  launched(c: OutputSource): void {
    this.#lastLauncher = c;
  }

  /** c is destroyed: nothing more goes to it unprompted. */
  forget(c: OutputSource): void {
    if (this.#lastLauncher === c) this.#lastLauncher = undefined;
  }

  /**
   * Right after a flush point of c, before its reply: hands over what CUDA
   * printed. Only a context that has launched a kernel can have printed; for
   * another the drain (a few syscalls, microseconds on a short call) would
   * bring only other contexts' output, which the capture's reader thread
   * delivers anyway.
   */
  drain(c: OutputSource): void {
    if (this.#n === undefined || !c.launched) return;
    this.#target = c;
    try {
      this.#n.outputDrain();
    } catch (e) {
      debug('drain failed: %s', (e as Error).message);
    } finally {
      this.#target = undefined;
    }
  }

  #deliver(kind: number, bytes: Uint8Array): void {
    const to = this.#target ?? this.#lastLauncher;
    if (to?.output === undefined || (kind !== 1 && kind !== 2 && kind !== 3)) {
      debug('%d bytes of device output (kind %d) for no session: dropped', bytes.length, kind);
      return;
    }
    try {
      to.output(kind, bytes);
    } catch (e) {
      debug('device output sink failed: %s', (e as Error).message);
    }
  }
}

/**
 * process.stderr.write goes to the real stderr through the capture's own
 * fd (n.outputWriteStderr) instead of fd 2, which is now the capture's
 * pipe; returns what puts it back. Every console.error, debug line and log
 * line of the process goes through this method.
 */
function ownStderrPast(n: CudaNative): () => void {
  const stderr = process.stderr;
  const own = Object.getOwnPropertyDescriptor(stderr, 'write');
  type Done = (e?: Error | null) => void;
  stderr.write = ((chunk: string | Uint8Array, encoding?: BufferEncoding | Done, done?: Done): boolean => {
    if (typeof encoding === 'function') [done, encoding] = [encoding, undefined];
    n.outputWriteStderr(typeof chunk === 'string' ? Buffer.from(chunk, encoding ?? 'utf8') : chunk);
    if (done) process.nextTick(done);
    return true;
  }) as typeof stderr.write;
  return () => {
    if (own) Object.defineProperty(stderr, 'write', own);
    else delete (stderr as { write?: unknown }).write;
  };
}

/** One per process: the capture owns the process's fds 1 and 2. */
export const deviceOutput = new DeviceOutput();
