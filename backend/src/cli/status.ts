// The status document of one qcuda-backend (one VM): what the process is,
// its frontend and the guest memory mapped, and what the device reports
// (qcuda: sessions, device memory against the quota, calls served). The
// backend serves it on its status socket; `qcuda status` prints it.
import type { VhostUserServer } from '../vhost-user';
import { mib, type QcudaStatus } from '../qcuda/status';
import type { GpuShareStatus } from '../qcuda/share/usage-window';

export interface BackendStatus {
  pid: number;
  uptimeSeconds: number;
  device: string;
  socket: string | undefined;
  frontend: { connected: boolean; memory: { gpa: number; size: number }[] };
  /** The device's own report (qcuda: QcudaStatus). */
  status?: object;
  /** With --gpu-share: this VM's weight and its part of the GPU's time against the other VMs' (qcuda/share/usage-window.ts). */
  gpuShare?: GpuShareStatus;
}

/** Where the status socket is by default: next to the vhost-user socket. */
export function defaultStatusSocket(vhostSocket: string): string {
  return `${vhostSocket}.status`;
}

export function backendStatus(
  server: VhostUserServer,
  socket: string | undefined,
  startedAt: number,
  gpuShare?: () => GpuShareStatus | undefined,
): BackendStatus {
  return {
    pid: process.pid,
    uptimeSeconds: Math.round((Date.now() - startedAt) / 1000),
    device: server.device.name,
    socket,
    frontend: { connected: server.connected, memory: server.memoryRegions.map((r) => ({ gpa: Number(r.gpa), size: Number(r.size) })) },
    status: server.device.status?.(),
    gpuShare: gpuShare?.(),
  };
}

function duration(s: number): string {
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function table(rows: string[][]): string[] {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => `  ${r.map((c, i) => c.padEnd(widths[i])).join('  ')}`.trimEnd());
}

function qcudaLines(q: QcudaStatus): string[] {
  const calls = q.served.reduce((a, b) => a + b, 0);
  const { used, quota, disks } = q.deviceMemory;
  const ofDisks = disks ? `, ${mib(disks)} of it by the GPU disks` : '';
  const lines = [
    `provider: ${q.provider}${q.gpu ? ' (GPU)' : ' (no GPU)'}`,
    `device memory: ${mib(used)} used${quota ? ` of a ${mib(quota)} quota (${((100 * used) / quota).toFixed(1)}%)` : ', no quota'}${ofDisks}`,
    `calls served: ${calls} (${q.served.map((n, i) => `queue ${i}: ${n}`).join(', ')})`,
  ];
  if (q.logDropped) lines.push(`log lines dropped (rate limit): ${q.logDropped}`);
  lines.push(`sessions: ${q.sessions.length}`);
  if (q.sessions.length > 0) {
    lines.push(
      ...table([
        ['SESSION', 'CALLS', 'DEVICE MEMORY', 'CONTEXT', 'MODULES', 'ARRAYS', 'GRAPHS'],
        ...q.sessions.map((s) => [
          s.id,
          String(s.calls),
          mib(s.deviceMemory),
          s.context ? 'yes' : 'no',
          String(s.modules),
          String(s.arrays),
          String(s.graphs),
        ]),
      ]),
    );
  }
  return lines;
}

function percent(part: number): string {
  return `${Math.round(100 * part)}%`;
}

/** "GPU share: weight 2, 31% of GPU time over 10 s (target 33%), 3 VMs" */
export function gpuShareLine(g: GpuShareStatus): string {
  return `GPU share: weight ${g.weight}, ${percent(g.share)} of GPU time over ${g.windowSeconds} s (target ${percent(g.target)}), ${g.vms} VM${g.vms === 1 ? '' : 's'}`;
}

/** The document as a person reads it. */
export function formatStatus(b: BackendStatus): string {
  const mem = b.frontend.memory;
  const total = mem.reduce((n, r) => n + r.size, 0);
  const lines = [
    `qcuda-backend pid ${b.pid}, up ${duration(b.uptimeSeconds)}, ${b.device} device on ${b.socket ?? 'an inherited fd'}`,
    `frontend: ${b.frontend.connected ? `connected, guest memory ${mib(total)} in ${mem.length} region${mem.length === 1 ? '' : 's'}` : 'none connected'}`,
  ];
  if (b.gpuShare) lines.push(gpuShareLine(b.gpuShare));
  if ((b.status as { device?: string } | undefined)?.device === 'qcuda') lines.push(...qcudaLines(b.status as QcudaStatus));
  return `${lines.join('\n')}\n`;
}
