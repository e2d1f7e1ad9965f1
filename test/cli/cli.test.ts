// The two commands as a user runs them: real processes, real signals.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { EchoDevice } from '../../backend/src/devices/echo';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Frontend } from '../../backend/src/vhost-user/frontend';
import { connect, tmpDir, until, KEEP_ROOT } from '../helpers';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');

/** --kernel and --initrd naming files that exist (qcuda checks), empty ones. */
function bootFiles(t: import('ava').ExecutionContext): string[] {
  const dir = tmpDir(t);
  for (const f of ['k', 'i']) fs.writeFileSync(path.join(dir, f), '');
  return [`--kernel=${path.join(dir, 'k')}`, `--initrd=${path.join(dir, 'i')}`];
}

test('qcuda-backend --help, --print-capabilities and bad usage', (t) => {
  const help = spawnSync(process.execPath, [BACKEND, '--help'], { encoding: 'utf8' });
  t.is(help.status, 0);
  for (const opt of ['--socket-path', '--fd', '--print-capabilities', '--device', '--queues', '--context-overhead'])
    t.true(help.stdout.includes(opt), opt);
  const caps = spawnSync(process.execPath, [BACKEND, '--print-capabilities'], { encoding: 'utf8' });
  t.is(caps.status, 0);
  t.deepEqual(JSON.parse(caps.stdout), { type: 'qcuda' });
  const both = spawnSync(process.execPath, [BACKEND, '--socket-path=/tmp/x', '--fd=3'], { encoding: 'utf8' });
  t.is(both.status, 2);
  t.regex(both.stderr, /give only one of --socket-path and --fd/);
  const dev = spawnSync(process.execPath, [BACKEND, '--socket-path=/tmp/x', '--device=gpu9'], { encoding: 'utf8' });
  t.is(dev.status, 2);
  t.regex(dev.stderr, /unknown device 'gpu9'/);
  const q = spawnSync(process.execPath, [BACKEND, '--socket-path=/tmp/x', '--queues=0'], { encoding: 'utf8' });
  t.is(q.status, 2);
  for (const [args, why] of [
    [['--socket-path=/tmp/x', '--worker-sandbox=off'], /--worker-sandbox must be seccomp or none, got 'off'/],
    [['--socket-path=/tmp/x', '--peer-uid=qemu'], /--peer-uid must be an integer/],
    [['--fd=3', '--peer-uid=0'], /--peer-uid needs --socket-path/],
  ] as const) {
    const r = spawnSync(process.execPath, [BACKEND, ...args], { encoding: 'utf8' });
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, why);
  }
  const o = spawnSync(process.execPath, [BACKEND, '--socket-path=/tmp/x', '--context-overhead=lots'], { encoding: 'utf8' });
  t.is(o.status, 2);
  t.regex(o.stderr, /--context-overhead: not a size: 'lots'/);
});

test('qcuda-backend serves a frontend, keeps listening after it leaves, and exits 0 on SIGTERM removing its socket', async (t) => {
  const sock = path.join(tmpDir(t), 'b.sock');
  const p = spawn(process.execPath, [BACKEND, `--socket-path=${sock}`, '--device=echo', '--queues=2', ...KEEP_ROOT], { stdio: 'ignore' });
  t.teardown(() => p.kill('SIGKILL'));
  t.true(await until(() => fs.existsSync(sock), 5000));
  for (let round = 0; round < 2; round++) {
    const fe = Frontend.connect(sock);
    await fe.negotiate();
    t.is(fe.queueNum, 2);
    await fe.start({ size: 8 });
    const u = await fe.submit(1, [
      { gpa: fe.mem.alloc(4), len: 4 },
      { gpa: fe.mem.alloc(12), len: 12, write: true },
    ]);
    t.is(u.len, 12);
    fe.close();
  }
  const exited = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
  p.kill('SIGTERM');
  t.is(await exited, 0);
  t.false(fs.existsSync(sock));
});

test('qcuda-backend --fd serves an inherited socket and exits when it closes', async (t) => {
  const { native } = await import('../../backend/src/sys/native');
  const [mine, theirs] = native.socketPair();
  const p = spawn(process.execPath, [BACKEND, '--fd=3', '--device=qcuda', '--queues=3'], { stdio: ['ignore', 'ignore', 'ignore', theirs] });
  native.close(theirs);
  t.teardown(() => p.kill('SIGKILL'));
  const fe = Frontend.fromFd(mine);
  await fe.negotiate();
  t.is(fe.queueNum, 3);
  const exited = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
  fe.close();
  t.is(await exited, 0);
});

test('several devices in one process, each on its own socket', async (t) => {
  const echo = connect(t, new EchoDevice({ queues: 2 }));
  const qcuda = connect(t, new QcudaDevice({ provider: emuProvider, queues: 3 }));
  await Promise.all([echo.fe.negotiate(), qcuda.fe.negotiate()]);
  t.is(echo.fe.queueNum, 2);
  t.is(qcuda.fe.queueNum, 3);
  await Promise.all([echo.fe.start({ size: 8 }), qcuda.fe.start({ size: 8 })]);
  const u = await echo.fe.submit(0, [
    { gpa: echo.fe.mem.alloc(3), len: 3 },
    { gpa: echo.fe.mem.alloc(11), len: 11, write: true },
  ]);
  t.is(u.len, 11);
});

test('qcuda with no command or a bad option explains itself', (t) => {
  const help = spawnSync(process.execPath, [QCUDA, 'help'], { encoding: 'utf8' });
  t.is(help.status, 0);
  for (const s of ['vm', 'qemu-args', '--file', '--timeout']) t.true(help.stdout.includes(s), s);
  const bad = spawnSync(process.execPath, [QCUDA, 'vm', '--nope'], { encoding: 'utf8' });
  t.is(bad.status, 2);
  t.regex(bad.stderr, /Unknown option '--nope'/);
  const user = spawnSync(process.execPath, [QCUDA, 'vm', '--backend-user=no-such-user-here', 'true'], { encoding: 'utf8' });
  t.is(user.status, 2);
  t.regex(user.stderr, process.getuid?.() === 0 ? /--backend-user=no-such-user-here: no such user/ : /--backend-user needs root/);
  // Nothing given and nothing recorded by a build (build-paths.ts).
  const noEnv = spawnSync(process.execPath, [QCUDA, 'vm', 'true'], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH, QCUDA_BUILD_PATHS: '/nonexistent/qcuda-paths.json' },
  });
  t.is(noEnv.status, 2);
  t.regex(noEnv.stderr, /qemu is not set: pass --qemu or set QEMU_BIN/);
  const boot = bootFiles(t);
  const args = spawnSync(process.execPath, [QCUDA, 'qemu-args', '--socket=/run/q.sock', ...boot, '--queues=8'], { encoding: 'utf8' });
  t.is(args.status, 0);
  t.regex(args.stdout, /-device vhost-user-qcuda-pci,chardev=qcuda0,num-queues=8/);
  t.regex(args.stdout, /memory-backend-memfd,id=mem,size=512M,share=on/);
});

test('GPU disks on the command line: capabilities, bad sizes and stores, the QEMU arguments', (t) => {
  const caps = spawnSync(process.execPath, [BACKEND, '--device=blk', '--print-capabilities'], { encoding: 'utf8' });
  t.deepEqual(JSON.parse(caps.stdout), { type: 'block', features: ['read-only'] });
  const run = (args: string[]) => spawnSync(process.execPath, args, { encoding: 'utf8' });
  const odd = run([BACKEND, '--socket-path=/tmp/x', '--device=blk', '--size=1000']);
  t.is(odd.status, 2);
  t.regex(odd.stderr, /--size must be a positive multiple of 512 bytes/);
  const store = run([BACKEND, '--socket-path=/tmp/x', '--device=blk', '--size=1M', '--store=disk']);
  t.is(store.status, 2);
  t.regex(store.stderr, /--store must be gpu or host/);
  const env = ['--qemu=/q', '--kernel=/k', '--initrd=/i'];
  const badDisk = run([QCUDA, 'vm', ...env, '--disk=1G,store=tape', 'true']);
  t.is(badDisk.status, 2);
  t.regex(badDisk.stderr, /unknown option 'store=tape'/);
  const args = run([QCUDA, 'qemu-args', '--socket=/run/q.sock', '--disk-socket=/run/d.sock', ...bootFiles(t)]);
  t.is(args.status, 0);
  t.regex(args.stdout, /-chardev socket,id=blk0,path=\/run\/d.sock -device vhost-user-blk-pci,chardev=blk0,num-queues=2/);
});

test('qcuda vm --file naming no file is a one-line usage error, exit 2', (t) => {
  const r = spawnSync(process.execPath, [QCUDA, 'vm', '--file=/nonexistent/qcuda-file', '--', 'true'], { encoding: 'utf8' });
  t.is(r.status, 2);
  t.is(r.stderr, "qcuda: --file /nonexistent/qcuda-file: no such file (try 'qcuda help')\n");
});

test('qcuda libvirt-xml --windows prints the Windows machine on the region at /dev/shm/NAME', (t) => {
  const dir = tmpDir(t);
  const dlls = path.join(dir, 'dlls');
  const fw = path.join(dir, 'fw');
  for (const d of [dlls, fw]) fs.mkdirSync(d);
  for (const f of [path.join(dlls, 'nvcuda.dll'), path.join(dir, 'win.qcow2'), path.join(dir, 'virtio-win.iso')]) fs.writeFileSync(f, '');
  for (const f of ['OVMF_CODE_4M.fd', 'OVMF_VARS_4M.fd']) fs.writeFileSync(path.join(fw, f), '');
  const args = [
    QCUDA,
    'libvirt-xml',
    '--windows',
    '--name=win1',
    '--qemu=/bin/true',
    `--windows-image=${dir}/win.qcow2`,
    '--shm=/dev/shm/qcuda-win1',
    '--shm-size=256M',
    `--dll-dir=${dlls}`,
    `--virtio-win=${dir}/virtio-win.iso`,
    '--vnc=127.0.0.1:3',
    '--memory=8192',
    '--cpus=4',
    '--type=qemu',
  ];
  // UEFI (the default) from the firmware folders QCUDA_FIRMWARE_DIRS names.
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', env: { ...process.env, QCUDA_FIRMWARE_DIRS: fw } });
  t.is(r.status, 0, r.stderr);
  const xml = r.stdout;
  t.regex(xml, /^<domain type='qemu' xmlns:qemu='http:\/\/libvirt\.org\/schemas\/domain\/qemu\/1\.0'>\n\s*<name>win1<\/name>/);
  t.regex(xml, /<memory unit='MiB'>8192<\/memory>\n\s*<vcpu>4<\/vcpu>/);
  t.regex(xml, /<type arch='x86_64' machine='q35'>hvm<\/type>/);
  t.regex(
    xml,
    new RegExp(`<loader readonly='yes' type='pflash'>${fw}/OVMF_CODE_4M.fd</loader>\\n    <nvram template='${fw}/OVMF_VARS_4M.fd'/>`),
  );
  t.regex(
    xml,
    new RegExp(`<driver name='qemu' type='qcow2'/>\\n      <source file='${dir}/win.qcow2'/>\\n      <target dev='sda' bus='sata'/>`),
  );
  t.regex(
    xml,
    new RegExp(
      `<driver name='qemu' type='fat'/>\\n      <source dir='${dlls}'/>\\n      <target dev='sdb' bus='usb'/>\\n      <readonly/>`,
    ),
  );
  t.regex(
    xml,
    new RegExp(
      `<disk type='file' device='cdrom'>\\n.*\\n      <source file='${dir}/virtio-win.iso'/>\\n      <target dev='sdc' bus='sata'/>`,
    ),
  );
  t.regex(xml, /<graphics type='vnc' port='5903' autoport='no'><listen type='address' address='127\.0\.0\.1'\/><\/graphics>/);
  t.regex(xml, /<video><model type='vga'\/><\/video>/);
  t.regex(xml, /<input type='tablet' bus='usb'\/>/);
  t.regex(xml, /<shmem name='qcuda-win1'>\s*<model type='ivshmem-plain'\/>\s*<size unit='M'>256<\/size>\s*<\/shmem>/);
  t.notRegex(xml, /seclabel/);
  // BIOS: no loader; a display on a unix socket.
  const bios = spawnSync(process.execPath, [...args, '--firmware=bios', `--vnc=unix:${dir}/vnc.sock`], { encoding: 'utf8' });
  t.is(bios.status, 0, bios.stderr);
  t.notRegex(bios.stdout, /<loader|<nvram/);
  t.regex(bios.stdout, new RegExp(`<graphics type='vnc'><listen type='socket' socket='${dir}/vnc.sock'/></graphics>`));
  // Not in /dev/shm: libvirt could not name it.
  const elsewhere = spawnSync(process.execPath, [...args, '--firmware=bios', `--shm=${dir}/r.shm`], { encoding: 'utf8' });
  t.is(elsewhere.status, 2);
  t.regex(elsewhere.stderr, /libvirt maps a region at \/dev\/shm\/NAME only/);
});
