// qcuda vm --disk's store when none is named: the GPU where one answers,
// else host memory, said on stderr; store=gpu without a GPU refused at once.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { chooseDiskStores } from '../../backend/src/cli/disk-store';
import { gpuProbe } from '../../backend/src/qcuda/choose-provider';
import type { VmDisk } from '../../backend/src/vm/runner';

const QCUDA = path.join(path.resolve(__dirname, '..', '..'), 'backend/src/cli/qcuda.js');
const noGpu = () => ({ ok: false, reason: 'libcuda.so.1 not found' });
const aGpu = () => ({ ok: true, reason: '1 CUDA device(s)' });

test('a disk without a store follows the GPU: host memory where none answers, GPU memory where one does', (t) => {
  const disks: VmDisk[] = [{ size: 1n << 20n }, { size: 1n << 20n, store: 'host' }];
  t.deepEqual(chooseDiskStores(disks, noGpu), ['disk 0: in host memory: no GPU (libcuda.so.1 not found)']);
  t.deepEqual(
    disks.map((d) => d.store),
    ['host', 'host'],
  );
  const more: VmDisk[] = [{ size: 1n << 20n }, { size: 1n << 20n, store: 'gpu' }];
  t.deepEqual(chooseDiskStores(more, aGpu), ['disk 0: in GPU memory']);
  t.deepEqual(
    more.map((d) => d.store),
    ['gpu', 'gpu'],
  );
});

test('store=gpu where no GPU answers is refused, naming the disk; an outside disk (socket=) is not asked about', (t) => {
  let asked = 0;
  const probe = () => (asked++, noGpu());
  t.throws(
    () =>
      chooseDiskStores(
        [
          { size: 1n << 20n, store: 'host' },
          { size: 1n << 20n, store: 'gpu' },
        ],
        probe,
      ),
    {
      message: '--disk 1: store=gpu, but no GPU answers here (libcuda.so.1 not found); use store=host',
    },
  );
  t.is(asked, 1);
  t.deepEqual(
    chooseDiskStores(
      [
        { size: 0n, socket: '/run/d.sock' },
        { size: 1n, store: 'host' },
      ],
      probe,
    ),
    [],
  );
  t.is(asked, 1, 'the GPU is probed only for a disk that needs it');
});

test('qcuda vm --disk=SIZE,store=gpu on a host without a GPU is a one-line usage error before anything starts', (t) => {
  const gpu = gpuProbe();
  const r = spawnSync(
    process.execPath,
    [QCUDA, 'vm', '--qemu=/nonexistent/q', '--kernel=/k', '--initrd=/i', '--disk=64M,store=gpu', '--', 'true'],
    {
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  t.is(r.status, 2);
  if (gpu.ok) {
    t.notRegex(r.stderr, /store=gpu/, 'a GPU answers here: the disk is not refused (the missing QEMU is)');
    return;
  }
  t.regex(r.stderr, /^qcuda: --disk 0: store=gpu, but no GPU answers here \(.+\); use store=host/);
  t.is(r.stderr.trim().split('\n').length, 1, r.stderr);
});
