// packaging/systemd/qcuda-backend@.service under systemd as PID 1: the disk
// image of `make guest-disk` booted by `qcuda vm --disk-image`, where
// test/vm/unit-users.sh installs the unit (its ExecStart this tree's
// backend, on this host's node) and starts two instances, vm1 and vm2.
// Each runs as a dynamic user of its own (security review 3, N1): two
// uids, neither of which may list the other's socket directory or JIT
// cache or connect to its socket, while a user of QEMU's group connects
// through the link /run/qcuda/VM.sock; a stop succeeds and leaves nothing
// of the VM's user behind. Each joins a GPU share table of its own then;
// under the drop-in of docs/operations.md (DynamicUser=no, User=qcuda) they
// are one user and one table again.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const QCUDA = path.join(ROOT, 'dist', 'backend', 'src', 'cli', 'qcuda.js');
const DISK = process.env.GUEST_DISK;
for (const [k, v] of Object.entries({ QEMU_BIN: process.env.QEMU_BIN, GUEST_DISK: DISK }))
  if (!v || !fs.existsSync(v)) throw new Error(`the unit test needs ${k} (make guest-disk builds the image); run it with 'make test'`);

/** What the backend needs to run in the guest: the built tree, its addons, its one runtime dependency. */
const TREE = [
  'dist',
  'addon/build/Release/qcuda_sys.node',
  'addon/build/Release/vhost_user_native.node',
  'addon/build/Release/qcuda_cuda.node',
  'node_modules/debug',
  'node_modules/ms',
  'package.json',
  'packaging/systemd',
];

function facts(stdout: string): Record<string, string> {
  return Object.fromEntries(
    stdout
      .split('\n')
      .map((l) => /^(\w+)=(.*)$/.exec(l))
      .filter((m) => m !== null)
      .map((m) => [m[1], m[2]]),
  );
}

test("two instances of the unit run as two uids that reach neither the other's directories nor its socket", (t) => {
  const dir = tmpDir(t);
  const tarball = path.join(dir, 'tree.tgz');
  const tar = spawnSync('tar', ['-czf', tarball, '-C', ROOT, ...TREE], { encoding: 'utf8' });
  t.is(tar.status, 0, tar.stderr);
  const files = [process.execPath, path.join(ROOT, 'test', 'vm', 'unit-users.sh'), tarball].flatMap((f) => ['--file', f]);
  const r = spawnSync(
    process.execPath,
    [
      QCUDA,
      'vm',
      `--disk-image=${DISK}`,
      '--provider=emu',
      '--memory=1024',
      '--timeout=400',
      '--quiet',
      ...files,
      '--',
      'echo guest | sudo -S bash ./unit-users.sh ./tree.tgz',
    ],
    { encoding: 'utf8', timeout: 480_000 },
  );
  t.is(r.status, 0, `${r.stdout}\n${r.stderr}`);
  const f = facts(r.stdout);
  const why = `${r.stdout}\n${r.stderr}`;
  t.is(f.active, 'active active', why);
  const [u1, u2] = f.uids.split(' ');
  t.regex(u1, /^\d+$/, why);
  t.regex(u2, /^\d+$/);
  t.not(u1, u2, 'a uid per VM');
  t.true(+u1 >= 61184 && +u1 <= 65519 && +u2 >= 61184 && +u2 <= 65519, "in systemd's range of dynamic users");
  t.is(f.groups1, 'render video', 'the GPU groups, not QEMU');
  for (const [vm, uid] of [
    ['vm1', u1],
    ['vm2', u2],
  ]) {
    t.is(f[`dir_${vm}`], `${uid} libvirt-qemu 2750`, `${vm}'s directory: its user's, QEMU's group`);
    t.is(f[`sock_${vm}`], `${uid} libvirt-qemu 770`, `${vm}'s socket: the group from the directory`);
    t.is(f[`link_${vm}`], `${vm}/qcuda.sock`);
    t.is(f[`cache_${vm}`], `${uid} 700`, `${vm}'s JIT cache`);
  }
  t.is(f.vm1_ls_vm2, 'Permission denied', "vm1's user cannot list vm2's socket directory");
  t.is(f.vm1_cache_vm2, 'Permission denied', 'nor its JIT cache');
  t.is(f.vm1_connect_vm2, 'EACCES', 'nor connect to its socket (no --peer-uid needed)');
  t.is(f.vm1_connect_vm1, 'connected', 'its own, it may');
  t.is(f.qemu_connect_vm2, 'connected', "QEMU's group connects through /run/qcuda/VM.sock");
  t.is(f.stopped, 'success success', 'a stop is not a failure');
  t.is(f.after_stop, 'vm1 vm2', 'the links are gone');
  t.is(f.left_vm1, 'root root 700 0', "the directory is empty and root's again");
  // A crash: systemd restarts it; its socket is back, its user's, and QEMU's group connects.
  t.is(f.restarted, 'active 1', why);
  const [sockUid, , , backendUid] = f.restarted_sock.split(' ');
  t.is(f.restarted_sock, `${sockUid} libvirt-qemu 770 ${backendUid}`);
  t.is(sockUid, backendUid, "the socket is the restarted backend's user's");
  t.is(f.restarted_qemu, 'connected');
  // --gpu-share: a table per VM's user, so the VMs do not meet ...
  t.is(f.table_vm1, `slot 0 of /dev/shm/qcuda-${u1}/qcuda-gpu-share-${u1}-gpu0`);
  t.is(f.table_vm2, `slot 0 of /dev/shm/qcuda-${u2}/qcuda-gpu-share-${u2}-gpu0`);
  // ... unless the drop-in makes them one user: one table, two slots, the unit's directory as before.
  const q = f.one_uids.split(' ');
  t.deepEqual(q, [q[2], q[2], q[2]], `both run as qcuda (${f.one_active})`);
  t.is(f.one_dir_vm1, 'qcuda libvirt-qemu 2750');
  // The two start at once (systemctl start vm1 vm2), so which takes slot 0 is
  // theirs to race for (CI once saw vm1 second): one table, a slot each.
  const one = `/dev/shm/qcuda-${q[2]}/qcuda-gpu-share-${q[2]}-gpu0`;
  t.deepEqual([f.one_table_vm1, f.one_table_vm2].sort(), [`slot 0 of ${one}`, `slot 1 of ${one}`], why);
  t.is(f.one_qemu_connect_vm1, 'connected');
  t.is(f.one_stopped, 'success success');
});
