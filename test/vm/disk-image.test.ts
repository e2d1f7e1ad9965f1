// The disk image of `make guest-disk` (vm-images/disk/), through the CLI as a
// user runs it: one full systemd boot in which DKMS's qcuda.ko is loaded,
// /dev/qcuda0 is the qcuda group's, and the demo's CUDA programs pass as the
// image's user over the packaged libraries; the image file is left as it was;
// a second boot where a person logs in on the serial console (--console);
// images that cannot work are refused before anything starts.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const QCUDA = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'qcuda.js');
const GUEST_BIN = path.resolve(__dirname, '..', '..', '..', 'build', 'guest', 'bin');
const DISK = process.env.GUEST_DISK;
for (const [k, v] of Object.entries({ QEMU_BIN: process.env.QEMU_BIN, GUEST_DISK: DISK }))
  if (!v || !fs.existsSync(v))
    throw new Error(`the disk image test needs ${k} (make guest-disk builds the image); run it with 'make test'`);

/** The demo's programs (qcuda vm --demo): the transport, then CUDA programs of both builds. */
const CUDA_PROGRAMS = [
  'device',
  'memcpy',
  'stream',
  'hostmem',
  'errors',
  'killcopy',
  'device_static',
  'memcpy_static',
  'stream_static',
  'hostmem_static',
];

// What the guest reports about itself before the programs run, one KEY=VALUE a line.
const FACTS = [
  'echo "user=$(id -un) groups=$(id -Gn)"',
  'echo "systemd=$(systemctl is-system-running)"',
  'echo "dkms=$(/usr/sbin/dkms status qcuda 2>/dev/null)"',
  'echo "module=$(/sbin/modinfo -F filename qcuda)"',
  'echo "loaded=$(grep -c "^qcuda " /proc/modules)"',
  'echo "dev=$(stat -c "%G %a" /dev/qcuda0)"',
  // Which file the loader took, and the package that owns it (readlink: dpkg knows /usr/lib, ldd says /lib).
  'owner() { dpkg -S "$(readlink -f "$1")"; }',
  'echo "cudart=$(owner "$(ldd ./device | sed -n "s/.*libcudart.so.13 => \\([^ ]*\\).*/\\1/p")")"',
  // nvcc's default build loads libcuda.so.1 with dlopen: ask the loader.
  'echo "libcuda=$(owner "$(LD_DEBUG=libs ./device_static 2>&1 >/dev/null | sed -n "s/.*calling init: \\(.*libcuda.so.1\\)$/\\1/p" | head -1)")"',
].join('; ');
const PROGRAMS =
  'nop_test -t 4 -n 100 > /tmp/nop.out || { cat /tmp/nop.out; exit 1; }; tail -1 /tmp/nop.out; ' +
  `for p in ${CUDA_PROGRAMS.join(' ')}; do $p > /tmp/$p.out || { cat /tmp/$p.out; exit 1; }; echo "$p: $(tail -1 /tmp/$p.out)"; done`;

function qcuda(args: string[], timeoutMs: number) {
  return spawnSync(process.execPath, [QCUDA, 'vm', ...args], { encoding: 'utf8', timeout: timeoutMs });
}

function facts(stdout: string): Record<string, string> {
  return Object.fromEntries(
    stdout
      .split('\n')
      .map((l) => /^(\w+)=(.*)$/.exec(l))
      .filter((m) => m !== null)
      .map((m) => [m[1], m[2]]),
  );
}

test.serial('a full systemd boot of the image runs the CUDA programs as its user over the packages', (t) => {
  t.timeout(540_000);
  const before = fs.statSync(DISK!);
  const files = ['nop_test', ...CUDA_PROGRAMS].flatMap((p) => ['--file', path.join(GUEST_BIN, p)]);
  // A bound for a guest gone wrong, not a timing: under TCG beside other work the
  // boot and 13 programs took 235 s of the 240 this had.
  const r = qcuda([`--disk-image=${DISK}`, '--provider=emu', '--timeout=420', '--quiet', ...files, '--', `${FACTS}; ${PROGRAMS}`], 480_000);
  t.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
  t.log(r.stderr.trim().split('\n').pop());
  // The runner's own report (qcuda-vm-run asked systemd before the command).
  t.regex(r.stderr, /guest command exited with status 0; systemd running; boot to qcuda-vm-run \d+ ms/);
  const f = facts(r.stdout);
  t.is(f.user, 'guest groups=guest sudo qcuda');
  t.is(f.systemd, 'running');
  t.regex(f.dkms, /^qcuda\/[\d.]+, 6\.12\.[^,]+-cloud-amd64, x86_64: installed$/);
  t.regex(f.module, /^\/lib\/modules\/6\.12\.[^/]+-cloud-amd64\/updates\/dkms\/qcuda\.ko/);
  t.is(f.loaded, '1');
  t.is(f.dev, 'qcuda 660');
  t.regex(f.cudart, /^qcuda-libs(:amd64)?: \/usr\/lib\/x86_64-linux-gnu\/libcudart\.so\.13$/);
  t.regex(f.libcuda, /^qcuda-libs(:amd64)?: \/usr\/lib\/x86_64-linux-gnu\/libcuda\.so\.1$/);
  t.regex(r.stdout, /^nop_test: PASS 400 NOPs$/m);
  for (const p of CUDA_PROGRAMS) t.regex(r.stdout, new RegExp(`^${p}: PASS`, 'm'), p);
  // The run wrote to a snapshot, not to the image.
  const after = fs.statSync(DISK!);
  t.is(after.mtimeMs, before.mtimeMs);
  t.is(after.size, before.size);
});

test.serial('a login on the serial console (qcuda vm --console), then sudo poweroff', async (t) => {
  const p = spawn(process.execPath, [QCUDA, 'vm', `--disk-image=${DISK}`, '--console', '--provider=emu', '--timeout=240'], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
  t.teardown(() => p.kill('SIGTERM')); // the CLI stops QEMU and the backend on SIGTERM
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  let err = '';
  p.stderr.on('data', (d: Buffer) => (err += d.toString()));
  // Waits for the console to show `re` after position `from`; returns where it ended.
  const expect = async (re: RegExp, from: number, ms: number): Promise<number> => {
    for (const t0 = Date.now(); Date.now() - t0 < ms; await new Promise((r) => setTimeout(r, 100))) {
      const m = re.exec(out.slice(from));
      if (m) return from + m.index + m[0].length;
      if (p.exitCode !== null) break;
    }
    throw new Error(`no ${re} on the console; its tail:\n${out.slice(-2000)}\nstderr:\n${err}`);
  };
  let at = await expect(/^qcuda login: $/m, 0, 180_000);
  p.stdin.write('guest\n');
  at = await expect(/Password: $/, at, 30_000);
  p.stdin.write('guest\n');
  at = await expect(/guest@qcuda:~\$ $/, at, 60_000);
  // Typed lines come back echoed: match only what the commands print.
  p.stdin.write('echo "groups=$(id -Gn) dev=$(stat -c %G.%a /dev/qcuda0)"; echo guest | sudo -S poweroff\n');
  await expect(/^groups=guest sudo qcuda dev=qcuda\.660\r?$/m, at, 30_000);
  t.is(await exited, 0, err);
  t.regex(err, /qcuda: the guest powered off \(QEMU exited with status 0\)/);
});

test.serial(
  'a missing image, images without the qcuda packages, and options a disk image does not take are refused before the VM starts',
  (t) => {
    const dir = tmpDir(t);
    const missing = qcuda([`--disk-image=${path.join(dir, 'nope.img')}`, '--', 'true'], 30_000);
    t.is(missing.status, 2);
    t.regex(missing.stderr, /disk image .*nope\.img does not exist \(`make guest-disk` builds/);

    const zeros = path.join(dir, 'zeros.img');
    fs.writeFileSync(zeros, Buffer.alloc(1 << 20));
    const notExt4 = qcuda([`--disk-image=${zeros}`, '--', 'true'], 30_000);
    t.is(notExt4.status, 2);
    t.regex(notExt4.stderr, /is not an ext2\/3\/4 filesystem image/);

    // A Debian root filesystem in miniature, with other packages only.
    const root = path.join(dir, 'root');
    fs.mkdirSync(path.join(root, 'var/lib/dpkg/info'), { recursive: true });
    fs.writeFileSync(path.join(root, 'var/lib/dpkg/info/base-files.list'), '/etc\n');
    const plain = path.join(dir, 'plain.img');
    const mk = spawnSync('mke2fs', ['-q', '-t', 'ext4', '-d', root, plain, '8M'], { encoding: 'utf8' });
    t.is(mk.status, 0, mk.stderr);
    const noPkgs = qcuda([`--disk-image=${plain}`, '--', 'true'], 30_000);
    t.is(noPkgs.status, 2);
    t.regex(
      noPkgs.stderr,
      /does not have the qcuda packages installed \(missing: qcuda-dkms, qcuda-libs\); install them in it with apt install/,
    );

    // What the image's side does not do (yet), and a console without an image.
    const share = qcuda([`--disk-image=${DISK}`, `--share=${dir}`, '--', 'true'], 30_000);
    t.is(share.status, 2);
    t.regex(share.stderr, /--share and --host-root work with the initramfs guest only/);
    const noImage = qcuda(['--console'], 30_000);
    t.is(noImage.status, 2);
    t.regex(noImage.stderr, /--console needs --disk-image/);
  },
);
