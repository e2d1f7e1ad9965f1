// The `cuda` provider. Without a GPU: the addon still loads and says plainly
// why CUDA cannot be used. With one (detected, or QCUDA_GPU_TESTS=1, which
// makes its absence a failure): real allocations, copies from memfd-backed
// "guest RAM" registered like the backend registers it, streams, events,
// errors, and the event loop kept free during long waits.
// QCUDA_LIBCUDA=/path/to/libcuda.so.1 loads another driver library (a fake one, say).
// The GPU tests are in cuda-provider-*.ts by subject. They run here, in one
// process and in this order, on one provider and one registration of guest
// RAM (cuda-provider-fixtures.ts); a file of its own per subject would leave
// ava a file without tests where there is no GPU.
import test from 'ava';
import { cudaNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { cudaAvailable, createCudaProvider } from '../../backend/src/qcuda/providers/cuda/cuda';
import { openGpu, realDriver } from './cuda-provider-fixtures';
import { memoryTests } from './cuda-provider-memory';
import { streamTests } from './cuda-provider-streams';
import { waitTests } from './cuda-provider-waits';
import { moduleTests } from './cuda-provider-modules';
import { hardeningTests } from './cuda-provider-hardening';
import { isolationNoneTests } from './cuda-provider-isolation-none';

const avail = cudaAvailable();
const wantGpu = process.env.QCUDA_GPU_TESTS === '1';

test('CUresult numbers map to the runtime API cudaError_t numbers', (t) => {
  const n = cudaNative();
  t.is(n.toCudaError(0), CudaErr.Success);
  t.is(n.toCudaError(1), CudaErr.InvalidValue);
  t.is(n.toCudaError(2), CudaErr.MemoryAllocation, 'CUDA_ERROR_OUT_OF_MEMORY -> cudaErrorMemoryAllocation');
  t.is(n.toCudaError(3), CudaErr.InitializationError, 'CUDA_ERROR_NOT_INITIALIZED -> cudaErrorInitializationError');
  t.is(n.toCudaError(100), CudaErr.NoDevice);
  t.is(n.toCudaError(101), CudaErr.InvalidDevice);
  t.is(n.toCudaError(400), CudaErr.InvalidResourceHandle, 'CUDA_ERROR_INVALID_HANDLE -> cudaErrorInvalidResourceHandle');
  t.is(n.toCudaError(600), CudaErr.NotReady);
  t.is(n.toCudaError(700), CudaErr.IllegalAddress);
  t.is(n.toCudaError(719), CudaErr.LaunchFailure);
  t.is(n.toCudaError(801), CudaErr.NotSupported);
  t.is(n.toCudaError(202), CudaErr.Unknown, 'CONTEXT_ALREADY_CURRENT has no runtime counterpart');
  t.is(n.toCudaError(916), CudaErr.Unknown, 'KEY_ROTATION has no runtime counterpart');
  t.is(n.toCudaError(12345), CudaErr.Unknown);
  t.is(n.NUM_ATTRS, 160);
});

if (!avail.ok) {
  test('without CUDA the provider says plainly why it is not available', async (t) => {
    if (wantGpu) {
      t.fail(`QCUDA_GPU_TESTS=1 but CUDA is not available: ${avail.reason}`);
      return;
    }
    const n = cudaNative();
    const p = n.probe();
    t.false(p.ok);
    t.is(p.reason, avail.reason);
    t.regex(avail.reason, /^(libcuda\.so\.1 not found|cannot load |no CUDA-capable device|cuInit failed: CUDA_ERROR_|.+ has no cu)/);
    if (realDriver && !(await libcudaPresent())) {
      t.is(avail.reason, 'libcuda.so.1 not found (no NVIDIA driver installed here)');
    }
    t.deepEqual(await n.probeAsync(), p, 'the async probe says the same');
    const e = await t.throwsAsync(createCudaProvider(0), { instanceOf: CudaError });
    t.is(e!.message, `CUDA is not available: ${avail.reason}`);
    t.true(e!.code === CudaErr.InitializationError || e!.code === CudaErr.NoDevice);
    t.throws(() => n.deviceProps(0), { message: `CUDA is not available: ${avail.reason}` });
    t.throws(() => n.openContext(0, 0, false), { message: `CUDA is not available: ${avail.reason}` });
  });
} else {
  openGpu();
  memoryTests();
  streamTests();
  waitTests();
  moduleTests();
  hardeningTests();
  isolationNoneTests(); // last: its known failure poisons this process's CUDA
}

async function libcudaPresent(): Promise<boolean> {
  const { execFileSync } = await import('node:child_process');
  try {
    return execFileSync('/sbin/ldconfig', ['-p'], { encoding: 'utf8' }).includes('libcuda.so.1');
  } catch {
    return false;
  }
}
