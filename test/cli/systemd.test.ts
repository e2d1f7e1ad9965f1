// packaging/systemd/qcuda-backend@.service: systemd accepts it (an instance
// of it verified by systemd-analyze), and its ExecStart, as systemd would
// expand it for a VM, starts a backend that serves the VM's socket and status.
// (Not run under systemd itself: CI has no systemd as PID 1.)
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir, until, KEEP_ROOT } from '../helpers';

const UNIT = path.resolve(__dirname, '..', '..', '..', 'packaging', 'systemd', 'qcuda-backend@.service');
const BACKEND = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js');
const QCUDA = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'qcuda.js');
const INSTALLED = '/usr/local/bin/qcuda-backend';
const unit = fs.readFileSync(UNIT, 'utf8');

function setting(key: string): string[] {
  return [...unit.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]);
}

test('systemd-analyze verify accepts an instance of the unit', (t) => {
  const dir = tmpDir(t);
  // verify checks that ExecStart's program exists: point it at one that does.
  const stub = path.join(dir, 'qcuda-backend');
  fs.writeFileSync(stub, '#!/bin/sh\n', { mode: 0o755 });
  fs.writeFileSync(path.join(dir, 'qcuda-backend@.service'), unit.replaceAll(INSTALLED, stub));
  fs.symlinkSync('qcuda-backend@.service', path.join(dir, 'qcuda-backend@vm1.service'));
  const r = spawnSync('systemd-analyze', ['verify', path.join(dir, 'qcuda-backend@vm1.service')], { encoding: 'utf8', timeout: 60_000 });
  t.is(r.status, 0, r.stderr);
  t.is(r.stderr.trim(), '', 'no warnings');
});

test('one backend per VM: the socket in /run/qcuda/VM, linked from /run/qcuda/VM.sock, options from /etc/qcuda/VM.conf, restarts, journald', (t) => {
  t.deepEqual(setting('ExecStart'), [
    `${INSTALLED} --socket-path=/run/qcuda/%i/qcuda.sock --device=qcuda $QCUDA_RESTART_STATE $QCUDA_BACKEND_OPTS`,
  ]);
  t.deepEqual(setting('EnvironmentFile'), ['-/etc/qcuda/%i.conf']);
  t.deepEqual(setting('Restart'), ['on-failure']);
  t.deepEqual(setting('StandardError'), ['journal']);
  // The VM's directory, made by root before the backend: its user's, QEMU's group (inherited by the socket), 2750.
  t.deepEqual(setting('ExecStartPre'), [
    '+/usr/bin/install -d -m 0755 /run/qcuda',
    '+/usr/bin/install -d /run/qcuda/%i',
    // The service's user, whatever it is (qcuda-VM, or a drop-in's): its CacheDirectory's.
    '+/usr/bin/chown --reference=/var/cache/qcuda/%i /run/qcuda/%i',
    '+/usr/bin/chgrp libvirt-qemu /run/qcuda/%i',
    '+/usr/bin/chmod 2750 /run/qcuda/%i',
    '+/usr/bin/ln -sfn %i/qcuda.sock /run/qcuda/%i.sock',
    '+/usr/bin/ln -sfn %i/qcuda.sock.status /run/qcuda/%i.sock.status',
  ]);
  t.deepEqual(setting('ReadWritePaths'), ['-/run/qcuda/%i'], 'made by ExecStartPre: absent when the + commands set up their namespace');
  t.deepEqual(setting('UMask'), ['0007'], 'the socket 0770: its user and QEMU');
  t.deepEqual(setting('ExecStopPost'), [
    '+/usr/bin/rm -f /run/qcuda/%i.sock /run/qcuda/%i.sock.status',
    '+/usr/bin/find /run/qcuda/%i -mindepth 1 -delete',
    '+/usr/bin/chown root:root /run/qcuda/%i',
    '+/usr/bin/chmod 00700 /run/qcuda/%i', // 00: GNU chmod keeps a directory's set-group-id bit otherwise
  ]);
  t.deepEqual(setting('RuntimeDirectory'), [], 'systemd would give it the service group again at each command');
  t.deepEqual(setting('Group'), [], "the VM's own group, not QEMU's");
});

test('a uid per VM (security review 3, N1): a dynamic user named by the instance, the GPU groups, its JIT cache 0700', (t) => {
  t.deepEqual(setting('DynamicUser'), ['yes']);
  // Without an instance in the name every instance would be one dynamic user (systemd names it by the unit's prefix).
  t.deepEqual(setting('User'), ['qcuda-%i']);
  t.deepEqual(setting('SupplementaryGroups'), ['video render']);
  t.deepEqual(setting('CacheDirectory'), ['qcuda/%i']);
  t.deepEqual(setting('CacheDirectoryMode'), ['0700']);
});

test("a restart keeps the state where VM.conf asks: a file in the VM's StateDirectory, a stop that leaves room for the drain", (t) => {
  // Off unless VM.conf turns it on (the cuda provider refuses it); the unit's comment names the file.
  t.deepEqual(
    setting('Environment').filter((e) => e.startsWith('QCUDA_RESTART_STATE=')),
    ['QCUDA_RESTART_STATE='],
  );
  t.true(unit.includes('QCUDA_RESTART_STATE=--restart-state=/var/lib/qcuda/%i/restart.state'), 'the line VM.conf takes');
  t.deepEqual(setting('StateDirectory'), ['qcuda/%i']);
  t.deepEqual(setting('StateDirectoryMode'), ['0700']);
  t.deepEqual(setting('KillSignal'), ['SIGTERM']);
  t.deepEqual(setting('KillMode'), ['mixed'], 'SIGTERM to the backend alone: its workers are its own to end');
  t.true(Number(setting('TimeoutStopSec')[0]) >= 60, 'the drain (30 s) and the save fit before systemd kills it');
  t.deepEqual(setting('RestartPreventExitStatus'), ['2'], 'a refused option is not retried every second');
});

/** ExecStart's words as systemd expands them for VM vm, the state directory and /run/qcuda in dirs of the test's. */
function execStart(vm: string, run: string, state: string, env: Record<string, string[]>): string[] {
  const defaults = Object.fromEntries(
    setting('Environment').map((e) => {
      const [k, ...v] = e.split('=');
      return [k, v.join('=').replaceAll('%i', vm).replaceAll('/var/lib/qcuda', state).split(' ')];
    }),
  );
  return setting('ExecStart')[0]
    .replaceAll('%i', vm)
    .replaceAll('/run/qcuda', run)
    .split(' ')
    .flatMap((w) => (w.startsWith('$') ? (env[w.slice(1)] ?? defaults[w.slice(1)] ?? []) : [w]))
    .filter((w) => w !== '');
}

test('ExecStart as systemd expands it for a VM starts a backend serving that VM', async (t) => {
  const run = tmpDir(t);
  const state = tmpDir(t);
  const vm = 'vm1';
  fs.mkdirSync(path.join(state, vm)); // StateDirectory=qcuda/%i, made by systemd
  // %i -> the instance, /run/qcuda and /var/lib/qcuda -> directories of the
  // test's, the environment file's options -> an emu provider with a quota.
  fs.mkdirSync(path.join(run, vm), { mode: 0o750 }); // what ExecStartPre makes
  const words = execStart(vm, run, state, {
    QCUDA_RESTART_STATE: [`--restart-state=${path.join(state, vm, 'restart.state')}`], // as a host VM's VM.conf sets it
    QCUDA_BACKEND_OPTS: ['--provider=emu', '--device-memory-limit=1G'],
  });
  t.true(words.includes(`--restart-state=${path.join(state, vm, 'restart.state')}`), words.join(' '));
  t.is(words[0], INSTALLED);
  const p = spawn(process.execPath, [BACKEND, ...words.slice(1), ...KEEP_ROOT], { stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => p.kill('SIGKILL'));
  let log = '';
  p.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  // The links ExecStartPre makes: the path from before DynamicUser= (and qcuda status's).
  fs.symlinkSync(`${vm}/qcuda.sock`, path.join(run, `${vm}.sock`));
  fs.symlinkSync(`${vm}/qcuda.sock.status`, path.join(run, `${vm}.sock.status`));
  t.true(await until(() => fs.existsSync(path.join(run, vm, 'qcuda.sock.status')), 10_000), log);
  t.true(fs.statSync(path.join(run, `${vm}.sock`)).isSocket(), 'the socket, through the link');
  const s = spawnSync(process.execPath, [QCUDA, 'status', `--socket=${path.join(run, `${vm}.sock`)}`], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  t.is(s.status, 0, s.stderr);
  t.regex(s.stdout, /^device memory: 0 MiB used of a 1024 MiB quota/m);
  const gone = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
  p.kill('SIGTERM'); // what systemctl stop sends
  t.is(await gone, 0, 'a clean stop is not a failure (Restart=on-failure leaves it stopped)');
  t.regex(log, /restart state: no frontend is connected: nothing to keep/);
});

test('a VM on the cuda provider starts without a restart state by default; turned on, the backend refuses to start', async (t) => {
  const run = tmpDir(t);
  const state = tmpDir(t);
  fs.mkdirSync(path.join(state, 'vm2'));
  fs.mkdirSync(path.join(run, 'vm2'), { mode: 0o750 }); // what ExecStartPre makes
  const refused = spawnSync(
    process.execPath,
    [
      BACKEND,
      ...execStart('vm2', run, state, {
        QCUDA_RESTART_STATE: [`--restart-state=${path.join(state, 'vm2', 'restart.state')}`],
        QCUDA_BACKEND_OPTS: ['--provider=cuda'],
      }).slice(1),
      ...KEEP_ROOT,
    ],
    {
      encoding: 'utf8',
      timeout: 20_000,
    },
  );
  t.is(refused.status, 2, refused.stderr);
  t.regex(refused.stderr, /--restart-state: the cuda provider's sessions cannot be saved yet/);
  const off = execStart('vm2', run, state, { QCUDA_BACKEND_OPTS: ['--provider=cuda'] }); // the unit's default
  t.false(
    off.some((w) => w.startsWith('--restart-state')),
    off.join(' '),
  );
});

test('host memory and tasks bounded per VM, CPU shared by weight (security review 3, N10)', (t) => {
  t.deepEqual(setting('MemoryMax'), ['32G']);
  t.deepEqual(setting('TasksMax'), ['8192']);
  t.deepEqual(setting('CPUWeight'), ['100']);
});

test('least privilege: a user of its own, no capabilities, a read-only system, unix sockets only, a system call filter; systemd-analyze security rates it SAFE', (t) => {
  t.deepEqual(setting('DynamicUser'), ['yes']);
  t.deepEqual(setting('NoNewPrivileges'), ['yes']);
  t.deepEqual(setting('CapabilityBoundingSet'), ['']);
  t.deepEqual(setting('ProtectSystem'), ['strict']);
  t.deepEqual(setting('PrivateTmp'), ['yes']);
  t.deepEqual(setting('RestrictAddressFamilies'), ['AF_UNIX']);
  t.deepEqual(setting('SystemCallFilter')[0], '@system-service');
  t.true(setting('SystemCallFilter').includes('seccomp'), 'a GPU worker may add its own filter (--worker-sandbox=seccomp)');
  t.deepEqual(
    setting('Environment').filter((e) => e.startsWith('CUDA_CACHE_PATH=')),
    ['CUDA_CACHE_PATH=/var/cache/qcuda/%i'],
    "the JIT cache is the VM's own",
  );
  const dir = tmpDir(t);
  const stub = path.join(dir, 'qcuda-backend');
  fs.writeFileSync(stub, '#!/bin/sh\n', { mode: 0o755 });
  fs.writeFileSync(path.join(dir, 'qcuda-backend@.service'), unit.replaceAll(INSTALLED, stub));
  fs.symlinkSync('qcuda-backend@.service', path.join(dir, 'qcuda-backend@vm1.service'));
  const r = spawnSync('systemd-analyze', ['security', '--offline=true', path.join(dir, 'qcuda-backend@vm1.service')], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  const score = /Overall exposure level for qcuda-backend@vm1\.service: ([\d.]+) (\w+)/.exec(r.stdout + r.stderr);
  t.truthy(score, r.stdout + r.stderr);
  t.log(`systemd-analyze security: ${score![1]} ${score![2]}`);
  t.true(Number(score![1]) <= 1.0, `exposure ${score![1]}`);
});
