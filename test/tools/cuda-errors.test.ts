// CUDA's error numbers as qcuda restates them agree with CUDA's headers
// (CUDA_HOME): the generated enum and table by construction (generated.test.ts
// keeps them current), and here by what they do; the tables still kept by
// hand, by reading them.
import fs from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { cudaNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { cudaErrors, cuResults } from '../../backend/src/tools/cuda-headers';
import { cudaErrMember } from '../../backend/src/tools/gen-cuda-errors';
import { REPO_ROOT } from '../../backend/src/tools/generated';

const UNKNOWN = 999; // cudaErrorUnknown

test('CudaErr names every cudaError_t of driver_types.h with its number', (t) => {
  const header = cudaErrors();
  t.true(header.length > 100, `${header.length} values read`);
  for (const e of header) t.is(CudaErr[cudaErrMember(e.name) as keyof typeof CudaErr], e.value, e.name);
  t.is(Object.keys(CudaErr).filter((k) => Number.isNaN(Number(k))).length, header.length);
});

test('the addon hands on every CUresult that is a cudaError_t too, and any other as cudaErrorUnknown', (t) => {
  const runtime = new Set(cudaErrors().map((e) => e.value));
  const n = cudaNative();
  const results = cuResults();
  t.true(results.length > 100, `${results.length} values read`);
  for (const r of results) t.is(n.toCudaError(r.value), runtime.has(r.value) ? r.value : UNKNOWN, r.name);
  t.is(n.toCudaError(12345), UNKNOWN);
});

/** `kFooBar = N` of cuda_api.h's CUresult enum, by its CUDA name (CUDA_ERROR_FOO_BAR, CUDA_SUCCESS). */
function addonResults(): Map<string, number> {
  const text = fs.readFileSync(path.join(REPO_ROOT, 'addon/src/cuda_api.h'), 'utf8');
  const block = /\/\/ CUresult values the addon[^\n]*\nenum : int \{([^}]*)\}/.exec(text)?.[1] ?? '';
  const snake = (k: string) => k.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();
  const named = [...block.matchAll(/^\s*k(\w+) = (\d+),/gm)].map((m): [string, number] => {
    const name = snake(m[1]);
    return [name === 'SUCCESS' ? 'CUDA_SUCCESS' : `CUDA_ERROR_${name}`, Number(m[2])];
  });
  return new Map(named);
}

test("the addon's own CUresult constants (cuda_api.h) are cuda.h's", (t) => {
  const header = new Map(cuResults().map((e) => [e.name, e.value]));
  const ours = addonResults();
  t.true(ours.size >= 10, `${ours.size} constants read`);
  for (const [name, value] of ours) t.is(header.get(name), value, name);
});

test('the guest test errors.cu asks the name of every cudaError_t', (t) => {
  const text = fs.readFileSync(path.join(REPO_ROOT, 'test/guest/errors.cu'), 'utf8');
  const list = /static const int codes\[\] = \{([^}]*)\}/.exec(text)?.[1] ?? '';
  const asked = new Set([...list.matchAll(/-?\d+/g)].map((m) => Number(m[0])));
  t.true(asked.size > 100, `${asked.size} codes read`);
  t.deepEqual(
    cudaErrors().filter((e) => !asked.has(e.value)),
    [],
  );
});
