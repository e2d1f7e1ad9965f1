// A libvirt domain with the qcuda device, as a user runs one: a
// qcuda-backend on a socket, `qcuda libvirt-xml`'s domain (guest RAM a shared
// memfd, the device through <qemu:commandline>) defined and started with
// virsh, a CUDA program in the guest, then destroy and undefine. The guest
// is the test image booted directly (kernel, an initramfs carrying the
// command), its results read from the second serial port's file.
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readStatus } from '../../backend/src/sys/status-socket';
import { domainXml } from '../../backend/src/vm/libvirt';
import { parseReport } from '../../backend/src/vm/result';
import { buildInitrd } from '../../backend/src/vm/runner';
import type { BackendStatus } from '../../backend/src/cli/status';
import type { QcudaStatus } from '../../backend/src/qcuda/status';
import { alive, tmpDir, until, KEEP_ROOT } from '../helpers';
import { holdLibvirtd, poll, qemuPidOf, stopChild, virsh } from './libvirtd';

// Absolute: libvirt starts QEMU in a directory of its own.
const env = Object.fromEntries(
  Object.entries({ qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD }).map(([k, v]) => [
    k,
    v && path.resolve(v),
  ]),
);
const missing = Object.entries(env)
  .filter(([, v]) => !v || !fs.existsSync(v))
  .map(([k]) => k);
if (missing.length > 0)
  throw new Error(
    `the libvirt test needs QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (missing: ${missing.join(', ')}); run it with 'make test'`,
  );

const BACKEND = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js');
/** The guest's whole run (TCG boot ~4 s, two programs); past it the domain is destroyed and the test fails. */
const RUN_TIMEOUT_MS = 180_000;
/** Waiting for libvirt-windows.test.ts to give libvirt back, the run, destroy and undefine. */
const TEST_TIMEOUT_MS = 600_000;
const COMMAND = 'device && memcpy';

test('a libvirt domain with the qcuda device runs a CUDA program, and is destroyed and undefined', async (t) => {
  const dir = tmpDir(t);
  const name = `qcuda-test-${process.pid}`;
  const sock = path.join(dir, 'vm.sock');
  const resultFile = path.join(dir, 'result');
  const consoleFile = path.join(dir, 'console');
  const times: string[] = [];
  const t0 = Date.now();
  const lap = (what: string, since: number) => times.push(`${what} ${Date.now() - since} ms`);
  t.timeout(TEST_TIMEOUT_MS);
  const libvirtd = await holdLibvirtd();
  lap(libvirtd.own ? 'libvirtd held and started' : 'libvirtd held (running)', t0);
  let backend: ChildProcess | undefined;
  let qemuPid: number | undefined;
  let defined = false;
  try {
    const t1 = Date.now();
    let log = '';
    backend = spawn(
      process.execPath,
      [BACKEND, `--socket-path=${sock}`, '--device=qcuda', '--queues=4', '--device-memory-limit=256M', ...KEEP_ROOT],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    backend.stderr!.on('data', (d: Buffer) => (log += d.toString()));
    t.true(await until(() => fs.existsSync(`${sock}.status`), 10_000), `backend did not start:\n${log}`);
    lap('backend', t1);

    const xmlFile = path.join(dir, 'domain.xml');
    fs.writeFileSync(
      xmlFile,
      domainXml({
        name,
        emulator: env.qemu!,
        socket: sock,
        type: 'qemu',
        memoryMiB: 512,
        cpus: 2,
        kernel: env.kernel!,
        initrd: buildInitrd(dir, { initrd: env.initrd!, command: COMMAND }),
        consoleFile,
        resultFile,
        runAsRoot: process.getuid?.() === 0,
      }),
    );
    const t2 = Date.now();
    const def = virsh('define', xmlFile);
    t.is(def.status, 0, def.out);
    defined = def.status === 0;
    lap('define', t2);
    const t2s = Date.now();
    const start = virsh('start', name);
    t.is(start.status, 0, start.out);
    lap('start', t2s);
    qemuPid = qemuPidOf(name);
    t.truthy(qemuPid, 'libvirt wrote the QEMU pid file');

    // The guest powers off after its command: the domain is then shut off.
    const t3 = Date.now();
    const done = await poll(
      () =>
        parseReport(fs.existsSync(resultFile) ? fs.readFileSync(resultFile, 'utf8') : '').complete &&
        virsh('domstate', name).out === 'shut off',
      RUN_TIMEOUT_MS,
    );
    lap('guest run to shut off', t3);
    const report = parseReport(fs.existsSync(resultFile) ? fs.readFileSync(resultFile, 'utf8') : '');
    const consoleText = fs.existsSync(consoleFile) ? fs.readFileSync(consoleFile, 'utf8') : '';
    t.true(done, `the guest did not finish within ${RUN_TIMEOUT_MS / 1000} s; console:\n${consoleText.slice(-3000)}`);
    t.is(report.module?.state, 'OK', report.log);
    t.is(report.exit, 0, `stdout:\n${report.stdout}\nstderr:\n${report.stderr}`);
    t.is(report.stdout.match(/^PASS/gm)?.length, 2, report.stdout);

    // What the backend saw of the VM: its log lines and its status.
    t.true(await until(() => /frontend disconnected/.test(log), 10_000), log);
    for (const re of [
      /vhost-user: qcuda: frontend connected/,
      /memory (table|region added): 1 region, 512 MiB: 0x0\+512 MiB/,
      /qcuda: session \w+ opened \(1 open\)/,
      /qcuda: session \w+ closed after \d+ calls, \d+(\.\d)? MiB device memory/,
    ])
      t.regex(log, re);
    const status = (await readStatus(`${sock}.status`)) as BackendStatus;
    const q = status.status as QcudaStatus;
    t.is(status.frontend.connected, false);
    t.deepEqual(q.sessions, [], 'every session closed with its process');
    t.deepEqual(q.deviceMemory, { used: 0, quota: 256 << 20, disks: 0 });
    t.true(q.served.reduce((a, b) => a + b, 0) > 10, `calls served: ${q.served}`);
  } finally {
    const t4 = Date.now();
    // Even when the test failed: the domain goes, then its definition.
    const destroy = virsh('destroy', name);
    if (defined) t.is(virsh('undefine', name).status, 0, 'undefine');
    lap('destroy + undefine', t4);
    t.log(`destroy: ${destroy.out}`);
    if (qemuPid !== undefined) t.false(alive(qemuPid), `QEMU (pid ${qemuPid}) is gone`);
    t.not(virsh('domstate', name).status, 0, 'the domain is no longer known');
    if (backend) await stopChild(backend);
    await libvirtd.release();
    t.log(`times: ${times.join(', ')}; whole test ${Date.now() - t0} ms`);
  }
});
