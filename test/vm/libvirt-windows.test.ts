// `qcuda libvirt-xml --windows`'s domain under a real libvirt daemon
// (docs/windows.md, "A Windows VM under libvirt"). No Windows image is
// reachable here: a blank disk stands in for one and BIOS finds nothing to
// boot, but its firmware gives the ivshmem device its BAR, and that BAR
// must be the backend's region: the region's header read through QEMU's
// monitor at the BAR, QEMU mapping the same file, and an attach the
// backend answers in the file seen at the BAR while the VM runs. After
// destroy and undefine the backend serves on and the region stays; the
// backend removes it when it stops. The build's QEMU has neither vvfat
// nor VNC, and there is no OVMF here: the full domain (UEFI, the DLL
// folder, the display) is only defined, not started.
import test, { type ExecutionContext } from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { IVSHMEM_PCI_ID } from '../../backend/src/vm/ivshmem';
import { windowsDomainXml, type WindowsDomainConfig } from '../../backend/src/vm/libvirt-windows';
import { Off, State } from '../../backend/src/shm/layout';
import { alive, tmpDir, until, KEEP_ROOT } from '../helpers';
import { holdLibvirtd, poll, qemuPidOf, stopChild, virsh, type Libvirtd } from './libvirtd';

// Absolute: libvirt starts QEMU in a directory of its own.
const QEMU = process.env.QEMU_BIN && path.resolve(process.env.QEMU_BIN);
if (!QEMU || !fs.existsSync(QEMU)) throw new Error("the libvirt Windows test needs QEMU_BIN; run it with 'make test'");

const BACKEND = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js');
/** The smallest region a VM takes (a power of two of at least 128M: ivshmem.ts). */
const REGION_BYTES = 128 << 20;
/** The whole test; the virsh calls time out after 60 s each. */
const TEST_TIMEOUT_MS = 240_000;
const ROOT = process.getuid?.() === 0;

let libvirtd: Libvirtd | undefined;
test.before(async (t) => {
  // Past libvirt.test.ts' run, where it holds libvirt first.
  t.timeout(TEST_TIMEOUT_MS + 300_000);
  libvirtd = await holdLibvirtd();
});
test.after.always(async () => {
  await libvirtd?.release();
});

/** What this QEMU build lacks of what a Windows domain has (the build is configured without QEMU's defaults). */
function qemuLacks(): { vnc: boolean; vvfat: boolean } {
  const out = (...args: string[]) => spawnSync(QEMU!, args, { encoding: 'utf8', timeout: 30_000 }).stdout ?? '';
  return { vnc: !/^-vnc\b/m.test(out('-help')), vvfat: !/\bvvfat\b/.test(out('-drive', 'format=help')) };
}

/** A blank file of bytes (a stand-in Windows disk, an ISO). */
function blank(file: string, bytes: number): string {
  fs.writeFileSync(file, '');
  fs.truncateSync(file, bytes);
  return file;
}

test.serial('the full domain (UEFI, the DLL folder, the ISO, the region, VNC) is one libvirt defines', (t) => {
  // A define can take most of a minute where libvirt re-probes QEMU (docs/operations.md).
  t.timeout(TEST_TIMEOUT_MS);
  const dir = tmpDir(t);
  const name = `qcuda-test-windef-${process.pid}`;
  const fw = path.join(dir, 'fw');
  fs.mkdirSync(path.join(dir, 'dlls'));
  fs.mkdirSync(fw);
  const lacks = qemuLacks();
  const c: WindowsDomainConfig = {
    name,
    emulator: QEMU,
    image: blank(path.join(dir, 'win.qcow2'), 1 << 20),
    shm: { path: `/dev/shm/${name}`, bytes: 512 << 20 },
    dllDir: path.join(dir, 'dlls'),
    virtioWin: blank(path.join(dir, 'virtio-win.iso'), 1 << 20),
    uefi: { code: blank(path.join(fw, 'OVMF_CODE_4M.fd'), 4 << 20), vars: blank(path.join(fw, 'OVMF_VARS_4M.fd'), 4 << 20) },
    vnc: lacks.vnc ? undefined : '127.0.0.1:7',
    type: 'qemu',
  };
  // libvirt refuses VNC at define where QEMU has none: then it is not checked here.
  if (lacks.vnc) t.log('not checked: VNC (this QEMU has none, and libvirt refuses the domain for it)');
  const xml = path.join(dir, 'domain.xml');
  fs.writeFileSync(xml, windowsDomainXml(c));
  const def = virsh('define', '--validate', xml);
  t.is(def.status, 0, def.out);
  try {
    const dumped = virsh('dumpxml', name).out;
    // libvirt's copy of the variables, made from the template at the first start.
    t.regex(dumped, new RegExp(`<nvram template='${fw}/OVMF_VARS_4M.fd'>/var/lib/libvirt/qemu/nvram/${name}_VARS.fd</nvram>`));
    t.regex(dumped, new RegExp(`<loader readonly='yes' type='pflash'>${fw}/OVMF_CODE_4M.fd</loader>`));
    t.regex(dumped, /<driver name='qemu' type='qcow2'\/>\s*<source file='[^']+win\.qcow2'\/>\s*<target dev='sda' bus='sata'\/>/);
    t.regex(
      dumped,
      /<disk type='dir' device='disk'>\s*<driver name='qemu' type='fat'\/>\s*<source dir='[^']+dlls'\/>\s*<target dev='sdb' bus='usb'\/>\s*<readonly\/>/,
    );
    t.regex(dumped, /<disk type='file' device='cdrom'>[^]*?<target dev='sdc' bus='sata'\/>\s*<readonly\/>/);
    t.regex(dumped, new RegExp(`<shmem name='${name}'>\\s*<model type='ivshmem-plain'/>\\s*<size unit='M'>512</size>`));
    if (!lacks.vnc) t.regex(dumped, /<graphics type='vnc' port='5907' autoport='no' listen='127\.0\.0\.1'>/);
  } finally {
    t.is(virsh('undefine', '--nvram', name).status, 0, 'undefine');
  }
  if (lacks.vvfat) t.log('not started: the DLL folder needs vvfat, which this QEMU lacks; UEFI needs OVMF, not here');
});

/** The ivshmem device's BAR 2 (the region) as QEMU's monitor shows it once the firmware placed it. */
function bar2(name: string): { at: bigint; bytes: bigint } | undefined {
  const pci = virsh('qemu-monitor-command', '--hmp', name, 'info pci').out;
  const dev = pci.split(/\n(?=\s*Bus\s)/).find((d) => d.includes(`PCI device ${IVSHMEM_PCI_ID}`));
  const m = dev && /BAR2: 64 bit prefetchable memory at 0x([0-9a-f]+) \[0x([0-9a-f]+)\]/.exec(dev);
  if (!m) return undefined;
  const at = BigInt(`0x${m[1]}`);
  // Unassigned, the BAR reads all ones.
  return at === 0n || at > BigInt(`0x${m[2]}`) ? undefined : { at, bytes: BigInt(`0x${m[2]}`) - at + 1n };
}

/** Guest-physical memory at addr as bytes (HMP's xp). */
function guestBytes(name: string, addr: bigint, n: number): Buffer {
  const out = virsh('qemu-monitor-command', '--hmp', name, `xp /${n}xb 0x${addr.toString(16)}`).out;
  return Buffer.from(
    out.split('\n').flatMap((l) => [...(l.split(': ')[1] ?? '').matchAll(/0x([0-9a-f]{2})\b/g)].map((m) => parseInt(m[1], 16))),
  );
}

/** The region's bytes at offset, read from its file. */
function fileBytes(region: string, offset: number, n: number): Buffer {
  const fd = fs.openSync(region, 'r');
  try {
    const b = Buffer.alloc(n);
    fs.readSync(fd, b, 0, n, offset);
    return b;
  } finally {
    fs.closeSync(fd);
  }
}

/** Writes a guest word of the header (the attach or detach generation) into the region's file. */
function writeWord(region: string, offset: number, value: number): void {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value);
  const fd = fs.openSync(region, 'r+');
  try {
    fs.writeSync(fd, b, 0, 4, offset);
  } finally {
    fs.closeSync(fd);
  }
}

/** Asks for an attach of generation gen as a guest does, and waits for the backend's answer in the region. */
async function attach(t: ExecutionContext, region: string, gen: number, log: () => string): Promise<void> {
  writeWord(region, Off.attach, gen);
  const answered = () => {
    const b = fileBytes(region, Off.served, 8);
    return b.readUInt32LE(0) === gen && b.readUInt32LE(4) === State.Ready;
  };
  t.true(await until(answered, 20_000), `attach ${gen} not served:\n${log()}`);
}

async function detach(t: ExecutionContext, region: string, gen: number, log: () => string): Promise<void> {
  writeWord(region, Off.detach, gen);
  t.true(await until(() => fileBytes(region, Off.state, 4).readUInt32LE(0) === State.Idle, 20_000), `detach ${gen}:\n${log()}`);
}

/** The stand-in Windows domain on the region (a blank disk and ISO in dir); its file. */
function domainFile(dir: string, name: string, region: string): string {
  const xml = path.join(dir, 'domain.xml');
  fs.writeFileSync(
    xml,
    windowsDomainXml({
      name,
      emulator: QEMU!,
      image: blank(path.join(dir, 'blank.img'), 64 << 20),
      shm: { path: region, bytes: REGION_BYTES },
      virtioWin: blank(path.join(dir, 'virtio-win.iso'), 1 << 20),
      vnc: qemuLacks().vnc ? undefined : '127.0.0.1:7',
      memoryMiB: 256,
      cpus: 1,
      type: 'qemu',
      runAsRoot: ROOT,
    }),
  );
  return xml;
}

/** Defines and starts the domain, runs check on it, and then (whatever happened) destroys and undefines it: QEMU is gone. */
async function withDomain(t: ExecutionContext, name: string, xml: string, check: (qemuPid: number) => Promise<void>): Promise<void> {
  let defined = false;
  let qemuPid: number | undefined;
  try {
    const def = virsh('define', xml);
    t.is(def.status, 0, def.out);
    defined = def.status === 0;
    const start = virsh('start', name);
    t.is(start.status, 0, start.out);
    qemuPid = qemuPidOf(name);
    if (!qemuPid) return t.fail('libvirt wrote no QEMU pid file');
    await check(qemuPid);
  } finally {
    const destroy = virsh('destroy', name);
    t.log(`destroy: ${destroy.out}`);
    if (defined) t.is(virsh('undefine', name).status, 0, 'undefine');
    if (qemuPid !== undefined) t.false(alive(qemuPid), `QEMU (pid ${qemuPid}) is gone`);
    t.not(virsh('domstate', name).status, 0, 'the domain is no longer known');
  }
}

/** The running domain's ivshmem BAR 2 is the backend's region: its header, QEMU's mapping of the file, an answer seen live. */
async function checkBar(t: ExecutionContext, name: string, region: string, qemuPid: number, log: () => string): Promise<void> {
  // SeaBIOS places the BARs before it looks for something to boot.
  let bar: ReturnType<typeof bar2>;
  const placed = await poll(() => (bar = bar2(name)) !== undefined, 60_000);
  if (!placed) return t.fail(`no BAR 2 for ${IVSHMEM_PCI_ID}:\n${virsh('qemu-monitor-command', '--hmp', name, 'info pci').out}`);
  t.is(bar!.bytes, BigInt(REGION_BYTES), 'BAR 2 is the size of the region');
  t.deepEqual(guestBytes(name, bar!.at, 64), fileBytes(region, 0, 64), "the header at BAR 2 is the region file's");
  // QEMU maps the backend's file (the same inode), shared.
  const maps = fs.readFileSync(`/proc/${qemuPid}/maps`, 'utf8').split('\n');
  const ino = String(fs.statSync(region).ino);
  t.true(
    maps.some((l) => l.endsWith(region) && / rw-s /.test(l) && l.split(/\s+/)[4] === ino),
    maps.filter((l) => l.includes('/dev/shm')).join('\n'),
  );
  // Live: what the backend writes now, the guest reads at the BAR.
  const gen = 0x51c0de01;
  await attach(t, region, gen, log);
  const answer = guestBytes(name, bar!.at + BigInt(Off.served), 8);
  t.is(answer.readUInt32LE(0), gen, 'the served generation, read at the BAR');
  t.is(answer.readUInt32LE(4), State.Ready, 'READY, read at the BAR');
  await detach(t, region, gen, log);
}

test.serial('a domain on a backend region: its ivshmem BAR is the region; destroy leaves the backend serving', async (t) => {
  t.timeout(TEST_TIMEOUT_MS);
  const dir = tmpDir(t);
  const name = `qcuda-test-win-${process.pid}`;
  const region = `/dev/shm/${name}`;
  if (fs.existsSync(region)) return t.fail(`${region} is left from an earlier run: remove it`);
  let log = '';
  const logged = () => log;
  const backend = spawn(process.execPath, [BACKEND, `--shm=${region}`, `--shm-size=${REGION_BYTES}`, '--provider=host', ...KEEP_ROOT], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  backend.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  try {
    t.true(await until(() => /serving the shared-memory region/.test(log), 15_000), `the backend did not start:\n${log}`);
    t.is(fileBytes(region, 0, 8).toString('latin1'), 'QCUDASHM', "the region's magic");
    t.log('started without the DLL disk (this QEMU has no vvfat) and with BIOS (no OVMF here)');
    await withDomain(t, name, domainFile(dir, name, region), (pid) => checkBar(t, name, region, pid, logged));
    // libvirt neither removes nor changes the region: the backend serves a new attach.
    t.true(backend.exitCode === null && backend.signalCode === null, `the backend exited:\n${log}`);
    t.is(fileBytes(region, 0, 8).toString('latin1'), 'QCUDASHM');
    await attach(t, region, 0x51c0de02, logged);
    await detach(t, region, 0x51c0de02, logged);
  } finally {
    await stopChild(backend);
  }
  t.false(fs.existsSync(region), 'the backend removed its region when it stopped');
  t.is(backend.exitCode, 0, log);
});
