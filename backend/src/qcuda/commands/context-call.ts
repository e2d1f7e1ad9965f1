// The run of every call a provider context answers one to one, derived from
// its declaration (ContextDecl in wire/protocol.ts): flags checked, handles
// looked up in the session (an ended handle forgotten first), the context's
// method called with the declared arguments, its result made the reply. A
// call declared `checked` has a run of its own in the file of its concept.
import type { Call, Result, Run } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { encode } from '../proto';
import type { ProviderContext } from '../provider';
import type { Session } from '../session/session';
import { then, type Now } from '../../sys/now';
import { CALLS, type CallDecl, type CmdName, type ContextDecl, type HandleKind } from '../wire/protocol';

/** The commands declared with `context` whose run is derived (not `checked`). */
export type ContextCmd = {
  [K in CmdName]: (typeof CALLS)[K] extends { context: { checked: true } }
    ? never
    : (typeof CALLS)[K] extends { context: object }
      ? K
      : never;
}[CmdName];

function lookup(s: Session, kind: HandleKind, h: bigint, ends: boolean): unknown {
  switch (kind) {
    case 'stream':
      return ends ? s.takeStream(h) : s.stream(h);
    case 'event':
      return ends ? s.takeEvent(h) : s.event(h);
    case 'module':
      return ends ? s.modules.takeModule(h) : s.modules.module(h);
    case 'function':
      return s.modules.func(h).ref;
  }
}

/** A host function the guest has not run yet still holds the handle: not ready, whatever the GPU says. */
function heldByHostFunction(s: Session, kind: HandleKind | undefined, h: bigint): boolean {
  if (kind === 'stream') return s.callbacks.gate(h) !== undefined;
  if (kind === 'event') return s.callbacks.eventGate(h) !== undefined;
  return false;
}

/**
 * The device whose context runs a call: that of the (created) stream it
 * names, else of the event, as CUDA runs work on its stream's device and an
 * event in its own; undefined (the current device) for a call that names
 * neither, or a function or module (loaded for the current device).
 */
function deviceFor(s: Session, handles: Readonly<Record<string, HandleKind>>, args: Record<string, unknown>): number | undefined {
  const named = Object.entries(handles);
  if (named.some(([, k]) => k === 'function' || k === 'module')) return undefined;
  for (const kind of ['stream', 'event'] as const)
    for (const [p, k] of named) {
      const d = k === kind ? s.deviceOfHandle(args[p] as bigint) : undefined;
      if (d !== undefined) return d;
    }
  return undefined;
}

function checkFlags(name: string, flags: [string, number][], args: Record<string, unknown>): void {
  for (const [field, allowed] of flags) {
    const v = args[field] as number;
    if (v & ~allowed) throw new CudaError(CudaErr.InvalidValue, `${name}: ${field} 0x${v.toString(16)}`);
  }
}

interface Memory {
  free: bigint;
  total: bigint;
}

/** Device memory as the VM sees it: its quota's limit as the total, what it has left as free. */
function quotaView(c: Call, m: Memory): Memory {
  const quota = c.session.vm.quota;
  const left = quota.left;
  if (left === undefined) return m;
  return { free: left < m.free ? left : m.free, total: quota.limit < m.total ? quota.limit : m.total };
}

function reply(c: Call, d: CallDecl, x: ContextDecl, ctx: ProviderContext, r: unknown): Result {
  switch (x.result) {
    case 'none':
      return {};
    case 'value':
      return { value: r as bigint };
    case 'signed':
      return { value: BigInt.asUintN(64, BigInt(r as number)) };
    case 'ready':
      return { status: r ? CudaErr.Success : CudaErr.NotReady };
    case 'out':
      return { out: encode(d.out!, r as never) };
    case 'memory':
      return { out: encode(d.out!, quotaView(c, r as Memory) as never) };
    case 'stream':
      return { value: c.session.addStream(ctx, r) };
    case 'event':
      return { value: c.session.addEvent(ctx, r) };
  }
}

function contextCall(name: ContextCmd): Run<ContextCmd> {
  const d: CallDecl = CALLS[name];
  const x = d.context!;
  const handles: Readonly<Record<string, HandleKind>> = d.handles ?? {};
  const flags = Object.entries(x.flags ?? {});
  const resolve = (c: Call) => {
    const args = c.args as Record<string, unknown>;
    return x.params.map((p) => (handles[p] ? lookup(c.session, handles[p], args[p] as bigint, d.ends === p) : args[p]));
  };
  return (c) => {
    if (flags.length > 0) checkFlags(name, flags, c.args as Record<string, unknown>);
    if (x.result === 'stream' || x.result === 'event') c.session.checkRoom(x.result);
    let params: unknown[] | undefined;
    if (x.result === 'ready') {
      // Answered without the GPU while a host function holds the handle.
      params = resolve(c);
      const h = x.params[0];
      if (heldByHostFunction(c.session, handles[h], (c.args as Record<string, bigint>)[h])) return { status: CudaErr.NotReady };
    }
    // The context first, as natively (a call makes it), then the handles.
    return c.session.withContext(
      (ctx) => {
        params ??= resolve(c);
        const method = ctx[x.method as keyof ProviderContext] as (...a: unknown[]) => Now<unknown>;
        return then(method.apply(ctx, params), (r) => reply(c, d, x, ctx, r));
      },
      deviceFor(c.session, handles, c.args as Record<string, unknown>),
    );
  };
}

/** The run of every call declared with `context` (but `checked`). */
function contextCalls(): { readonly [K in ContextCmd]: Run<K> } {
  const names = (Object.keys(CALLS) as CmdName[]).filter((k): k is ContextCmd => {
    const d: CallDecl = CALLS[k];
    return d.context !== undefined && !d.context.checked;
  });
  return Object.fromEntries(names.map((k) => [k, contextCall(k)])) as { readonly [K in ContextCmd]: Run<K> };
}

export const RUNS = contextCalls();
