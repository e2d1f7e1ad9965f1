// qcuda vm --windows-image (docs/windows.md, "A Windows VM"). No Windows
// image is reachable here: a blank disk stands in for one, so the VM
// boots nothing, but QEMU must start with the devices a Windows guest
// needs (the disk on AHCI, virtio-win's CD-ROM, the ivshmem device on the
// backend's region), as QMP reports them, and everything must go at the
// end. The build's QEMU has neither vvfat nor VNC (configured without
// default features), so the DLL disk and the display are checked on the
// command line only.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Qmp } from '../../backend/src/vm/qmp';
import { windowsQemuArgs } from '../../backend/src/vm/windows';
import { runWindowsVm } from '../../backend/src/vm/windows-run';
import { base } from './helpers';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test('the command line: the disk on AHCI, the DLLs as a read-only FAT disk, the ISO, ivshmem, UEFI, VNC', (t) => {
  const args = windowsQemuArgs({
    image: '/vm/win11.qcow2',
    shm: { path: '/run/q/qcuda.shm', bytes: 512 << 20 },
    dllDir: '/b/zip/qcuda-windows-x64',
    virtioWin: '/iso/virtio-win.iso',
    uefi: { code: '/fw/OVMF_CODE_4M.fd', vars: '/tmp/r/efivars.fd' },
    vnc: '127.0.0.1:3',
    accel: 'kvm',
  }).join(' ');
  t.regex(args, /-drive file=\/vm\/win11\.qcow2,if=none,id=windows,format=qcow2 -device ide-hd,drive=windows,bus=ide\.0,bootindex=0/);
  t.regex(
    args,
    /-device qemu-xhci .*-drive file=fat:ro:\/b\/zip\/qcuda-windows-x64,if=none,id=qcuda-dlls,format=raw,readonly=on -device usb-storage,drive=qcuda-dlls/,
  );
  t.regex(args, /-drive file=\/iso\/virtio-win\.iso,if=none,id=virtio-win,media=cdrom,readonly=on -device ide-cd,drive=virtio-win/);
  t.regex(
    args,
    /-object memory-backend-file,id=qcuda-shm,mem-path=\/run\/q\/qcuda\.shm,size=536870912,share=on -device ivshmem-plain,memdev=qcuda-shm/,
  );
  t.regex(
    args,
    /-drive if=pflash,format=raw,unit=0,readonly=on,file=\/fw\/OVMF_CODE_4M\.fd -drive if=pflash,format=raw,unit=1,file=\/tmp\/r\/efivars\.fd/,
  );
  t.regex(args, /-accel kvm -cpu host -machine q35 .*-m 4096M/);
  t.regex(args, /-vnc 127\.0\.0\.1:3/);
  // A raw image is named raw, never probed.
  t.regex(windowsQemuArgs({ image: '/vm/win.img', shm: { path: '/s', bytes: 128 << 20 } }).join(' '), /format=raw -device ide-hd/);
});

test('QEMU takes the DLL disk: read-only on USB (a raw image in place of vvfat, which this QEMU lacks)', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-wintest-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = (name: string, bytes: number) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, '');
    fs.truncateSync(f, bytes);
    return f;
  };
  const dlls = file('dlls.img', 8 << 20);
  const args = windowsQemuArgs({
    image: file('blank.img', 64 << 20),
    shm: { path: file('region', 128 << 20), bytes: 128 << 20 },
    dllDir: path.join(dir, 'dlls'),
    virtioWin: file('virtio-win.iso', 1 << 20),
    accel: 'tcg',
    memoryMiB: 256,
    cpus: 1,
  }).map((a) => a.replace(`fat:ro:${path.join(dir, 'dlls')}`, dlls));
  t.true(
    args.some((a) => a.startsWith(`file=${dlls},`)),
    args.join(' '),
  );
  // The devices are made before the monitor reads "quit": exit 0 only if each was taken (ide-hd refused it: "Block node is read-only").
  const r = spawnSync(base.qemu, [...args, '-S', '-monitor', 'stdio'], { input: 'quit\n', encoding: 'utf8', timeout: 60_000 });
  t.is(r.status, 0, r.stderr);
});

test.serial('QEMU starts with a blank disk as the Windows image: the devices are there, and all of it goes at the end', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-wintest-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const image = path.join(dir, 'blank.img');
  const iso = path.join(dir, 'virtio-win.iso');
  fs.writeFileSync(image, Buffer.alloc(0));
  fs.truncateSync(image, 64 << 20);
  fs.writeFileSync(iso, Buffer.alloc(2048 * 16));
  let seen: { pci: string[]; block: string[]; region: number; pids: number[]; regionPath: string } | undefined;
  const r = await runWindowsVm({
    qemu: base.qemu,
    image,
    virtioWin: iso,
    shmBytes: 128 << 20,
    memoryMiB: 256,
    cpus: 1,
    backendArgs: ['--provider=emu'],
    timeoutMs: 120_000,
    onStarted: (i) => {
      void (async () => {
        const q = await Qmp.connect(i.monitor);
        try {
          const buses = await q.execute<{ devices: PciDevice[] }[]>('query-pci');
          const pci = buses.flatMap((b) => b.devices.map(hex));
          const block = (await q.execute<{ device: string; qdev?: string }[]>('query-block')).map((b) => b.device);
          seen = { pci, block, region: fs.statSync(i.region.path).size, pids: [i.qemuPid, i.backendPid], regionPath: i.region.path };
          await q.execute('quit').catch(() => undefined);
        } finally {
          q.close();
        }
      })().catch((e) => t.log(`QMP: ${(e as Error).message}`));
    },
  });
  t.is(r.exit, 0, r.qemuLog);
  t.truthy(seen, 'QMP answered');
  t.true(seen!.pci.includes('1af4:1110'), `ivshmem in ${seen!.pci.join(' ')}`);
  t.true(seen!.block.includes('windows') && seen!.block.includes('virtio-win'), seen!.block.join(' '));
  t.is(seen!.region, 128 << 20);
  for (const pid of seen!.pids) t.false(alive(pid), `process ${pid} still runs`);
  t.false(fs.existsSync(seen!.regionPath));
});

/** What query-pci says of a device (the part read here). */
interface PciDevice {
  id: { vendor: number; device: number };
}

/** A PCI device as vendor:device in hex. */
function hex(d: PciDevice): string {
  return `${d.id.vendor.toString(16).padStart(4, '0')}:${d.id.device.toString(16).padStart(4, '0')}`;
}
