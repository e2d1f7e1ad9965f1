// `qcuda vm` ends alike whether its guest is Linux or Windows: a VM that
// failed is one line naming the side and status 125 (cli/vm-failed.ts).
// QEMU is /bin/false, so each VM fails at start, after its backend ran.
import test from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { vmFailed } from '../../backend/src/cli/vm-failed';
import { VmConfigError, VmError } from '../../backend/src/vm/runner';

const QCUDA = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-vm-failed-'));
process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
const EMPTY = path.join(dir, 'empty');
fs.writeFileSync(EMPTY, '');
const DLLS = path.join(dir, 'dlls');
fs.mkdirSync(DLLS);
fs.writeFileSync(path.join(DLLS, 'nvcuda.dll'), '');

/** qcuda with args: its status and stderr, once it has exited (killed after 60 s). */
function qcuda(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [QCUDA, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stderr });
    });
  });
}

const VM = ['vm', '--qemu=/bin/false', '--provider=emu'];

test('a Linux VM whose QEMU fails: one line naming qemu, status 125', async (t) => {
  const r = await qcuda([...VM, `--kernel=${EMPTY}`, `--initrd=${EMPTY}`, '--', 'true']);
  t.is(r.status, 125, r.stderr);
  t.regex(r.stderr, /^qcuda: VM failed \(qemu\): QEMU exited/m);
});

test("qcuda vm takes --provider=host, emu's old name: its backend starts and QEMU fails as above", async (t) => {
  const r = await qcuda(['vm', '--qemu=/bin/false', '--provider=host', `--kernel=${EMPTY}`, `--initrd=${EMPTY}`, '--', 'true']);
  t.is(r.status, 125, r.stderr);
  t.regex(r.stderr, /^qcuda: VM failed \(qemu\): QEMU exited/m);
});

test('a Windows VM whose QEMU fails: the same line, the same status', async (t) => {
  const r = await qcuda([...VM, `--windows-image=${EMPTY}`, `--dll-dir=${DLLS}`, '--firmware=bios']);
  t.is(r.status, 125, r.stderr);
  t.regex(r.stderr, /^qcuda: VM failed \(qemu\): QEMU exited/m);
});

test('options the VM cannot take go to usage; an error of no VM is thrown on', (t) => {
  const usage = (msg: string): never => {
    throw new Error(`usage: ${msg}`);
  };
  t.throws(() => vmFailed(new VmConfigError('no kernel'), usage), { message: 'usage: no kernel' });
  const bug = new TypeError('a bug');
  t.is(
    t.throws(() => vmFailed(bug, usage)),
    bug,
  );
  const written: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = (s: string | Uint8Array) => written.push(String(s)) > 0;
  try {
    t.is(vmFailed(new VmError('backend', 'it died'), usage), 125);
  } finally {
    process.stderr.write = write;
  }
  t.deepEqual(written, ['qcuda: VM failed (backend): it died\n']);
});
