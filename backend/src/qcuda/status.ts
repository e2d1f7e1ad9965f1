// What a qcuda device holds, as the status socket reports it and as the log
// line of a closing session says it: one description of a session, used by both.
import type { Session } from './session/session';

export interface SessionStatus {
  /** The session id (hex), as the guest driver's SESSION_OPEN returned it. */
  id: string;
  /** Requests served for it. */
  calls: number;
  /** Of those, the ones its worker's ring server answered in C (workers/ring-server.ts). */
  callsInC: number;
  /** Device memory it holds against the VM's quota, bytes. */
  deviceMemory: number;
  /** Whether it has a CUDA context (with isolation: a worker process). */
  context: boolean;
  modules: number;
  arrays: number;
  graphs: number;
}

export interface QcudaStatus {
  device: 'qcuda';
  provider: string;
  gpu: boolean;
  sessions: SessionStatus[];
  /** All sessions together against --device-memory-limit (quota 0: none); of used, what the VM's GPU disks hold (`qcuda vm`: one quota). */
  deviceMemory: { used: number; quota: number; disks: number };
  /** Requests served, per queue. */
  served: number[];
  /** Log lines held back by the rate limit since the last one let through. */
  logDropped: number;
}

export function sessionStatus(s: Session): SessionStatus {
  return {
    id: s.id.toString(16),
    calls: s.calls,
    callsInC: 0,
    deviceMemory: Number(s.allocated),
    context: s.hasContext,
    modules: s.modules.moduleCount,
    arrays: s.objects.arrayCount,
    graphs: s.objects.graphCount,
  };
}

/** "1234 calls (1200 answered in C)", or "1234 calls" when its ring server answered none. */
export function describeCalls(calls: number, callsInC: number): string {
  return callsInC > 0 ? `${calls} calls (${callsInC} answered in C)` : `${calls} calls`;
}

/** "1234 calls, 64 MiB device memory, a context, 2 modules" (what a closing session held). */
export function describeSession(s: SessionStatus): string {
  const parts = [describeCalls(s.calls, s.callsInC), `${mib(s.deviceMemory)} device memory`, s.context ? 'a context' : 'no context'];
  if (s.modules) parts.push(`${s.modules} modules`);
  if (s.arrays) parts.push(`${s.arrays} arrays`);
  if (s.graphs) parts.push(`${s.graphs} graphs`);
  return parts.join(', ');
}

export function mib(bytes: number): string {
  return `${+(bytes / (1 << 20)).toFixed(1)} MiB`;
}
