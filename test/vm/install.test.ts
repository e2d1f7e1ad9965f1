// `make install` (here its launcher step, install-bin, into a temporary
// PREFIX) gives a qcuda that finds the build's QEMU, guest kernel and
// initramfs with an empty environment, the variables still overriding them.
import test, { type ExecutionContext } from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const env = { qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD };
for (const [k, v] of Object.entries(env))
  if (!v || !fs.existsSync(v))
    throw new Error(`VM tests need QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (${k} missing); run them with 'make test'`);

/** Installs the launchers into a fresh PREFIX; returns its bin directory. */
function install(t: ExecutionContext): string {
  const prefix = tmpDir(t);
  const r = spawnSync('make', ['-s', '-C', ROOT, 'install-bin', `PREFIX=${prefix}`], { encoding: 'utf8', timeout: 120_000 });
  t.is(r.status, 0, r.stderr);
  return path.join(prefix, 'bin');
}

/** The installed qcuda with nothing in its environment but PATH (and what is given). */
function qcuda(bin: string, args: string[], extra: Record<string, string> = {}, timeout = 60_000) {
  return spawnSync('env', ['-i', `PATH=${bin}:/usr/bin:/bin`, ...Object.entries(extra).map(([k, v]) => `${k}=${v}`), 'qcuda', ...args], {
    encoding: 'utf8',
    timeout,
  });
}

test('the installed qcuda finds the QEMU, kernel and initramfs the build made, with no environment', (t) => {
  const bin = install(t);
  const args = qcuda(bin, ['qemu-args', '--socket=/tmp/none.sock']);
  t.is(args.status, 0, args.stderr);
  t.true(args.stdout.includes(`-kernel ${env.kernel} `), args.stdout);
  t.true(args.stdout.includes(`-initrd ${env.initrd} `), args.stdout);
  const xml = qcuda(bin, ['libvirt-xml', '--name=t', '--socket=/tmp/none.sock', `--disk=${env.initrd}`]);
  t.is(xml.status, 0, xml.stderr);
  t.true(xml.stdout.includes(`<emulator>${env.qemu}</emulator>`), xml.stdout);
  // And the help says where they come from.
  t.regex(qcuda(bin, ['help']).stdout, /build\/qcuda-paths\.json/);
});

test('the environment still overrides what the build recorded', (t) => {
  const bin = install(t);
  const other = path.join(tmpDir(t), 'other-kernel');
  fs.writeFileSync(other, 'not a kernel');
  const r = qcuda(bin, ['qemu-args', '--socket=/tmp/none.sock'], { GUEST_KERNEL: other });
  t.is(r.status, 0, r.stderr);
  t.true(r.stdout.includes(`-kernel ${other} `), r.stdout);
  t.true(r.stdout.includes(`-initrd ${env.initrd} `), r.stdout);
  const bad = qcuda(bin, ['qemu-args', '--socket=/tmp/none.sock'], { GUEST_INITRD: '/nonexistent/initrd' });
  t.is(bad.status, 2);
  t.regex(bad.stderr, /\/nonexistent\/initrd: no such file/);
});

test('the installed qcuda boots a guest and runs a command in it, with no environment', (t) => {
  const bin = install(t);
  const r = qcuda(bin, ['vm', '--provider=emu', '--quiet', '--timeout=240', '--', 'echo booted; exit 7'], {}, 300_000);
  t.is(r.status, 7, r.stderr);
  t.is(r.stdout, 'booted\n');
});
