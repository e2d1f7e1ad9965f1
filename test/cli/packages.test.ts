// The guest packages (make guest-debs, packaging/): what each holds and
// declares, and that the driver's packaged sources build with the MAKE line
// DKMS runs, against the guest kernel's headers (lintian ran at build time).
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const DEB_DIR = path.join(ROOT, 'build/deb');
const VERSION = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version as string;
const DKMS = path.join(DEB_DIR, `qcuda-dkms_${VERSION}_all.deb`);
const LIBS = path.join(DEB_DIR, `qcuda-libs_${VERSION}_amd64.deb`);

function sh(cmd: string, args: string[], cwd?: string): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

function extract(deb: string): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-deb-'));
  sh('dpkg-deb', ['-x', deb, d]);
  return d;
}

test("qcuda-libs: the three libraries in the multiarch directory, conflicting with NVIDIA's packages of them", (t) => {
  t.true(fs.existsSync(LIBS), `${LIBS}: run make guest-debs`);
  const field = (f: string) => sh('dpkg-deb', ['-f', LIBS, f]).trim();
  t.is(field('Architecture'), 'amd64');
  t.regex(field('Conflicts'), /libcuda1/);
  t.regex(field('Conflicts'), /libcudart13/);
  t.regex(field('Conflicts'), /libnvidia-ml1/);
  t.regex(field('Depends'), /qcuda-dkms/);
  const d = extract(LIBS);
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }));
  for (const lib of ['libcuda.so.1', 'libcudart.so.13', 'libnvidia-ml.so.1']) {
    const f = path.join(d, 'usr/lib/x86_64-linux-gnu', lib);
    t.true(fs.existsSync(f), lib);
    // Stripped by the packaging (its symbols go to the -dbgsym package): the same build id as the one built.
    const id = (x: string) => /Build ID: ([0-9a-f]+)/.exec(sh('readelf', ['-n', x]))?.[1];
    t.truthy(id(f));
    t.is(id(f), id(path.join(ROOT, 'build/guest/lib', lib)), `${lib} is the one built`);
  }
});

test('qcuda-dkms: sources, dkms.conf, udev rule for the qcuda group, loaded at boot; the sources build qcuda.ko as DKMS would', (t) => {
  t.true(fs.existsSync(DKMS), `${DKMS}: run make guest-debs`);
  t.regex(sh('dpkg-deb', ['-f', DKMS, 'Depends']), /dkms/);
  const d = extract(DKMS);
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }));
  const src = path.join(d, `usr/src/qcuda-${VERSION}`);
  const conf = fs.readFileSync(path.join(src, 'dkms.conf'), 'utf8');
  t.regex(conf, new RegExp(`^PACKAGE_VERSION="${VERSION.replace(/\./g, '\\.')}"$`, 'm'));
  t.regex(conf, /^AUTOINSTALL="yes"$/m);
  const rules = fs
    .readdirSync(path.join(d, 'lib/udev/rules.d'))
    .map((f) => fs.readFileSync(path.join(d, 'lib/udev/rules.d', f), 'utf8'))
    .join('');
  t.regex(rules, /KERNEL=="qcuda\[0-9\]\*", GROUP="qcuda", MODE="0660"/);
  t.is(
    fs
      .readFileSync(path.join(d, 'usr/lib/modules-load.d/qcuda.conf'), 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'))
      .join(),
    'qcuda',
  );
  // DKMS's MAKE[0], with its variables as DKMS sets them, on a copy of the
  // sources (DKMS builds in its own tree), against the guest kernel's headers.
  const kver = fs
    .readdirSync('/usr/src')
    .filter((n) => /^linux-headers-.*-cloud-amd64$/.test(n))
    .sort()
    .pop();
  t.truthy(kver, 'the guest kernel headers (make vm installs them)');
  const build = path.join(d, 'build');
  fs.cpSync(src, build, { recursive: true });
  const make = /^MAKE\[0\]="(.*)"$/m
    .exec(conf)![1]
    .replaceAll('${kernel_source_dir}', path.join('/usr/src', kver!))
    .replaceAll('${dkms_tree}/${PACKAGE_NAME}/${PACKAGE_VERSION}/build', build);
  sh('bash', ['-c', `${make} -j2`]);
  const info = sh('/sbin/modinfo', [path.join(build, 'qcuda.ko')]);
  t.regex(info, /^name:\s+qcuda$/m);
  t.regex(info, /^license:\s+GPL$/m);
});
