// The guest's result channel (second serial port), as vm-images/init writes
// it: "@@QCUDA <KIND> <args>" lines; program output arrives base64-encoded
// after BEGIN, so nothing the program prints can be mistaken for a marker.
export interface GuestReport {
  initAt?: number; // guest uptime (s) when /init started
  module?: { state: 'OK' | 'FAIL' | 'NODEV'; detail: string };
  runAt?: number;
  /** Disk images only: what `systemctl is-system-running --wait` said before the command ran (running, degraded, ...). */
  systemd?: string;
  stdout: string;
  stderr: string;
  exit?: number;
  complete: boolean; // END seen
  log: string;
  error?: string;
}

export function parseReport(text: string): GuestReport {
  const r: GuestReport = { stdout: '', stderr: '', complete: false, log: '' };
  const b64: Record<'STDOUT' | 'STDERR' | 'LOG', string[]> = { STDOUT: [], STDERR: [], LOG: [] };
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const m = /^@@QCUDA (\w+) ?(.*)$/.exec(line);
    if (!m) continue;
    const [, kind, rest] = m;
    switch (kind) {
      case 'INIT':
        r.initAt = Number(rest);
        break;
      case 'MODULE': {
        const [state, ...detail] = rest.split(' ');
        r.module = { state: state as 'OK' | 'FAIL' | 'NODEV', detail: detail.join(' ') };
        break;
      }
      case 'RUN':
        r.runAt = Number(rest);
        break;
      case 'SYSTEMD':
        r.systemd = rest.split(' ')[0];
        break;
      case 'STDOUT':
      case 'STDERR':
      case 'LOG':
        b64[kind].push(rest);
        break;
      case 'EXIT':
        r.exit = Number(rest);
        break;
      case 'END':
        r.complete = true;
        break;
      case 'ERROR':
        r.error = rest;
        break;
      default:
        break;
    }
  }
  const decode = (lines: string[]) => Buffer.from(lines.join(''), 'base64').toString('utf8');
  r.stdout = decode(b64.STDOUT);
  r.stderr = decode(b64.STDERR);
  r.log = decode(b64.LOG);
  return r;
}
