// The shared-memory transport through a real QEMU ivshmem-plain device
// (docs/windows.md, issue 48): the backend's region file mapped by QEMU as
// the device's BAR 2, found in a Linux guest by its PCI id (1af4:1110) and
// mapped by qcuda's libcuda.so.1 at /sys/bus/pci/devices/BDF/resource2
// (QCUDA_SHM), as a Windows guest maps it through virtio-win's driver. The
// same programs run over the virtio device first: their output and exit
// status must be the same both ways.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { runVm } from '../../backend/src/vm/runner';
import { GUEST_FIND_SHM, IVSHMEM_PCI_ID } from '../../backend/src/vm/ivshmem';
import { base, section } from './helpers';

/** Guest programs of the image (test/guest) that run on the emu provider: the device's properties, copies of many sizes, streams, pinned memory. */
const PROGRAMS = ['device', 'memcpy', 'stream', 'hostmem'];

function runAll(label: string): string {
  return PROGRAMS.map((p) => `echo "=== ${label} ${p}"; ${p}; echo "=== ${label} ${p} exit $?"`).join('\n');
}

test.serial('a guest program over the ivshmem device prints what it prints over the virtio device', async (t) => {
  t.timeout(660_000); // a TCG guest on a loaded host; runVm's own bound is 600 s
  const script = [
    // The virtio path first: QCUDA_SHM is not set yet.
    runAll('virtio'),
    GUEST_FIND_SHM,
    'echo "=== bar"; echo "$QCUDA_SHM $(stat -c %s $QCUDA_SHM)"',
    runAll('shm'),
  ].join('\n');
  let region: { path: string; bytes: number } | undefined;
  let backendLog = '';
  const r = await runVm({
    ...base,
    command: script,
    backendArgs: ['--provider=emu'],
    shmBytes: 256 << 20,
    timeoutMs: 600_000,
    onBackendLog: (s) => (backendLog += s),
    onStarted: (i) => {
      const p = path.join(i.dir, 'qcuda.shm');
      region = { path: p, bytes: fs.statSync(p, { throwIfNoEntry: false })?.size ?? -1 };
    },
  });
  t.is(r.exit, 0, r.stdout + r.stderr);
  // The backend made the region before QEMU started; the run removed it.
  t.is(region?.bytes, 256 << 20);
  t.false(fs.existsSync(region!.path));
  // The guest found the device by its id and BAR 2 is the whole region.
  t.regex(section(r.stdout, 'bar'), /^\/sys\/bus\/pci\/devices\/0000:[0-9a-f:.]+\/resource2 268435456$/, `no ${IVSHMEM_PCI_ID}`);
  const exit = (label: string, p: string) => new RegExp(`=== ${label} ${p} exit (\\d+)`).exec(r.stdout)?.[1];
  for (const p of PROGRAMS) {
    const virtio = section(r.stdout, `virtio ${p}`);
    t.is(exit('virtio', p), '0', `${p} over virtio:\n${virtio}`);
    t.regex(virtio, new RegExp(`PASS: ${p}: \\d+ checks`), p);
    t.is(exit('shm', p), exit('virtio', p), `${p}: exit status over the region`);
    t.is(section(r.stdout, `shm ${p}`), virtio, `${p}: the output over the region differs from the virtio device's`);
  }
  // Each shm program attached to the region, and the backend served it there.
  const served = backendLog.match(/shm \S+: attach \d+ served/g) ?? [];
  t.true(served.length >= PROGRAMS.length, backendLog);
});
