// GPU disks in a real guest (qcuda vm --disk): stock QEMU's
// vhost-user-blk-pci on a qcuda-backend --device=blk, here on its host store
// (the GPU store runs in test/gpu). What the guest writes reads back after
// its page cache is dropped, a filesystem lives on it, discard reads back as
// zeroes, a read-only disk refuses writes, and a disk backend that dies
// fails the run with nothing left running.
import test from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runVm, VmError, type StartedInfo } from '../../backend/src/vm/runner';
import { alive, KEEP_ROOT } from '../helpers';

const env = { qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD };
const missing = Object.entries(env)
  .filter(([, v]) => !v || !fs.existsSync(v))
  .map(([k]) => k);
if (missing.length > 0)
  throw new Error(`VM tests need QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (missing: ${missing.join(', ')}); run them with 'make test'`);
const BACKEND = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js');
const base = {
  qemu: env.qemu!,
  kernel: env.kernel!,
  initrd: env.initrd!,
  timeoutMs: 180_000,
  memoryMiB: 768,
  backendArgs: ['--provider=emu'],
};

test.serial(
  'a disk on the host store: data survives a dropped page cache, ext2 on it, discard, two queues; a read-only disk refuses writes',
  async (t) => {
    const r = await runVm({
      ...base,
      disks: [
        { size: 64n << 20n, store: 'host' },
        { size: 8n << 20n, store: 'host', readOnly: true },
      ],
      command: [
        'echo "=== disks $(ls /dev/vd* | tr "\\n" " ")"',
        'echo "=== vda $(cat /sys/block/vda/size) sectors, $(ls /sys/block/vda/mq | wc -l) queues; vdb ro $(cat /sys/block/vdb/ro)"',
        'dd if=/dev/urandom of=/tmp/a bs=1M count=24 2>/dev/null',
        // Written from two processes at once (two queues), at two places.
        'dd if=/tmp/a of=/dev/vda bs=1M count=12 conv=fsync 2>/dev/null & dd if=/tmp/a of=/dev/vda bs=1M skip=12 seek=40 count=12 conv=fsync 2>/dev/null; wait',
        'echo 3 > /proc/sys/vm/drop_caches',
        'dd if=/dev/vda of=/tmp/b bs=1M count=12 2>/dev/null; dd if=/dev/vda of=/tmp/c bs=1M skip=40 count=12 2>/dev/null',
        'cat /tmp/b /tmp/c | cmp - /tmp/a && echo "=== raw same"',
        'blkdiscard -o 0 -l 1048576 /dev/vda && echo 3 > /proc/sys/vm/drop_caches',
        'echo "=== discarded $(dd if=/dev/vda bs=1M count=1 2>/dev/null | md5sum | cut -c1-8) zero $(dd if=/dev/zero bs=1M count=1 2>/dev/null | md5sum | cut -c1-8)"',
        'echo "=== after it $(dd if=/dev/vda bs=1M skip=1 count=11 2>/dev/null | md5sum | cut -c1-8) written $(dd if=/tmp/a bs=1M skip=1 count=11 2>/dev/null | md5sum | cut -c1-8)"',
        'mke2fs -q /dev/vda >/dev/null && mkdir -p /mnt && mount -t ext2 /dev/vda /mnt && cp /tmp/a /mnt/a && mkdir /mnt/d && cp /tmp/b /mnt/d/b && umount /mnt',
        'echo 3 > /proc/sys/vm/drop_caches; mount -t ext2 -o ro /dev/vda /mnt && cmp /mnt/a /tmp/a && cmp /mnt/d/b /tmp/b && echo "=== fs same" && umount /mnt',
        'dd if=/tmp/a of=/dev/vdb bs=4096 count=1 conv=fsync 2>/dev/null && echo "=== ro written" || echo "=== ro refused"',
        'echo "=== ro reads $(dd if=/dev/vdb bs=1M count=8 2>/dev/null | wc -c) bytes"',
      ].join('\n'),
    });
    t.is(r.exit, 0, `${r.stdout}\n${r.stderr}`);
    const o = r.stdout;
    t.regex(o, /^=== disks \/dev\/vda \/dev\/vdb $/m);
    t.regex(o, /^=== vda 131072 sectors, 2 queues; vdb ro 1$/m);
    t.regex(o, /^=== raw same$/m, 'what was written from two processes reads back after the cache is dropped');
    const discarded = /^=== discarded (\w+) zero (\w+)$/m.exec(o);
    t.truthy(discarded, o);
    t.is(discarded![1], discarded![2], 'a discarded MiB reads back as zeroes');
    const after = /^=== after it (\w+) written (\w+)$/m.exec(o);
    t.is(after![1], after![2], 'the rest is as written');
    t.regex(o, /^=== fs same$/m, 'files on ext2 survive an unmount and a dropped cache');
    t.regex(o, /^=== ro refused$/m);
    t.regex(o, /^=== ro reads 8388608 bytes$/m);
  },
);

test.serial("swap on a disk: a tmpfs larger than the guest's RAM pages out to it and reads back as written", async (t) => {
  // 300 MiB through the guest's swap under TCG: a CI run beside other work passed
  // the 180 s bound of the others. A bound for a guest gone wrong, not a timing.
  t.timeout(420_000);
  const r = await runVm({
    ...base,
    timeoutMs: 360_000,
    memoryMiB: 256,
    disks: [{ size: 384n << 20n, store: 'host' }],
    command: [
      'mkswap /dev/vda >/dev/null && swapon /dev/vda',
      'mkdir -p /scratch && mount -t tmpfs -o size=400m tmpfs /scratch',
      // 300 MiB of random bytes in a guest of 256 MiB: most of it can only be on the disk.
      'dd if=/dev/urandom bs=1M count=300 2>/dev/null | tee /scratch/a | sha256sum | cut -c1-64 > /tmp/written',
      'echo "=== swapped $(awk \'/^SwapTotal/ {t=$2} /^SwapFree/ {f=$2} END {print int((t-f)/1024)}\' /proc/meminfo) MiB"',
      'echo "=== read $(sha256sum < /scratch/a | cut -c1-64) written $(cat /tmp/written)"',
    ].join('\n'),
  });
  t.is(r.exit, 0, `${r.stdout}\n${r.stderr}`);
  const swapped = /^=== swapped (\d+) MiB$/m.exec(r.stdout);
  t.truthy(swapped, r.stdout);
  t.true(Number(swapped![1]) >= 100, `only ${swapped![1]} MiB went to the swap disk`);
  const sums = /^=== read (\w{64}) written (\w{64})$/m.exec(r.stdout);
  t.truthy(sums, r.stdout);
  t.is(sums![1], sums![2], 'what came back from swap is what was written');
});

test.serial("a disk backend killed mid-write fails the run as the backend's and leaves nothing running", async (t) => {
  let info: StartedInfo | undefined;
  let seen = '';
  let killed = false;
  const e = await t.throwsAsync(
    runVm({
      ...base,
      timeoutMs: 90_000,
      disks: [{ size: 32n << 20n, store: 'host' }],
      command: 'echo "=== writing"; while :; do dd if=/dev/urandom of=/dev/vda bs=1M count=16 conv=fsync 2>/dev/null; done',
      onStarted: (i) => (info = i),
      onConsole: (s) => {
        seen += s;
        if (killed || !info || !seen.includes('qcuda-init: qcuda.ko loaded')) return;
        killed = true;
        setTimeout(() => process.kill(info!.diskPids[0], 'SIGKILL'), 1500);
      },
    }),
    { instanceOf: VmError },
  );
  t.is(e!.side, 'backend', e!.message);
  t.regex(e!.message, /the backend of disk 0 died during the run \(killed by SIGKILL\)/);
  t.truthy(info);
  for (const pid of [info!.qemuPid, info!.backendPid, ...info!.diskPids]) t.false(alive(pid), `process ${pid} is gone`);
  t.false(fs.existsSync(info!.dir), 'the temp dir is gone');
});

test('a disk that does not fit its store fails the run before QEMU starts, naming the disk', async (t) => {
  const e = await t.throwsAsync(runVm({ ...base, disks: [{ size: 1n << 50n, store: 'host' }], command: 'true' }), { instanceOf: VmError });
  t.is(e!.side, 'backend');
  t.regex(e!.message, /disk 0[\s\S]*does not fit/);
});

test.serial('a disk outlives its guest: a second guest booted onto the same backend reads what the first wrote', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-disk-'));
  const sock = path.join(dir, 'disk.sock');
  const be = spawn(
    process.execPath,
    [BACKEND, `--socket-path=${sock}`, '--device=blk', '--queues=2', '--size=32M', '--store=host', ...KEEP_ROOT],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let err = '';
  be.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  try {
    for (let i = 0; i < 100 && !fs.existsSync(sock); i++) await new Promise((r) => setTimeout(r, 50));
    t.true(fs.existsSync(sock), err);
    const disk = { size: 32n << 20n, socket: sock };
    const first = await runVm({
      ...base,
      disks: [disk],
      command:
        'dd if=/dev/urandom of=/tmp/a bs=1M count=8 2>/dev/null; dd if=/tmp/a of=/dev/vda bs=1M conv=fsync 2>/dev/null; echo "=== $(md5sum < /tmp/a | cut -c1-32)"',
    });
    t.is(first.exit, 0, first.stderr);
    const second = await runVm({
      ...base,
      disks: [disk],
      command: 'echo "=== $(dd if=/dev/vda bs=1M count=8 2>/dev/null | md5sum | cut -c1-32)"',
    });
    t.is(second.exit, 0, second.stderr);
    const sum = (o: string) => /^=== ([0-9a-f]{32})$/m.exec(o)?.[1];
    t.truthy(sum(first.stdout), first.stdout);
    t.is(sum(second.stdout), sum(first.stdout), "the second guest reads the first one's bytes");
    t.is(be.exitCode, null, 'the backend serves on between guests');
  } finally {
    be.kill('SIGTERM');
    await new Promise((r) => (be.exitCode !== null ? r(undefined) : be.once('exit', r)));
    fs.rmSync(dir, { recursive: true, force: true });
  }
  t.false(alive(be.pid!), 'the backend is gone');
});
