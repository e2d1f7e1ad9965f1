// The environment CUDA runs with in processes that run guest code (a
// session's worker, and this process with --isolation=none), where the
// operator has not said otherwise:
//  - CUDA_MODULE_LOADING=EAGER: a module's code is put in device memory at
//    cuModuleLoadData, where the load's device memory is measured and
//    counted in the VM's quota; loaded lazily (the default since CUDA 12.2)
//    it came later, counted nowhere (security review 2, M3): on the H200
//    (driver 580) a module of 4 kernels (3 MB of PTX) took 2 MiB at the load
//    with EAGER, and 0 at the load, then 2 MiB at cuModuleGetFunction, lazily.
//  - CUDA_CACHE_PATH: the PTX JIT cache is the VM's own, a directory this
//    process makes (mode 0700) and removes when it exits. The default,
//    ~/.nv/ComputeCache, is shared by every backend of the user: whether a
//    PTX is in it (how long a load takes) told one VM what another ran
//    (security review 2, L7). CUDA_CACHE_DISABLE set by the operator is kept.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

let cacheDir: string | undefined;

/** This process's JIT cache directory, made on first use and removed at its exit. */
export function jitCacheDir(): string {
  if (cacheDir === undefined) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-jit-'));
    fs.chmodSync(dir, 0o700);
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    cacheDir = dir;
  }
  return cacheDir;
}

/** base with what CUDA needs in a process running guest code, where base does not say already. */
export function cudaEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = { ...base };
  env.CUDA_MODULE_LOADING ??= 'EAGER';
  if (env.CUDA_CACHE_PATH === undefined && env.CUDA_CACHE_DISABLE === undefined) {
    try {
      env.CUDA_CACHE_PATH = jitCacheDir();
    } catch {
      env.CUDA_CACHE_DISABLE = '1'; // no directory of its own (a read-only /tmp): no cache rather than the shared one
    }
  }
  return env;
}
