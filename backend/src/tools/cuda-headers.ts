// CUDA's headers at CUDA_HOME (default /usr/local/cuda), read by the
// generators that restate CUDA's numbers: the one place that knows where
// the headers are and how their error enums are written.
import fs from 'node:fs';
import path from 'node:path';

/** One enumerator: its name in the header and its number. */
export interface EnumValue {
  name: string;
  value: number;
}

/** The CUDA installation the generators read (CUDA_HOME). */
export function cudaHome(): string {
  const home = process.env.CUDA_HOME ?? '/usr/local/cuda';
  if (!fs.existsSync(path.join(home, 'include', 'driver_types.h')))
    throw new Error(`CUDA 13 is not installed at ${home} (set CUDA_HOME): the CUDA tables are generated from it`);
  return home;
}

function enumBody(file: string, start: RegExp, end: string): string {
  const text = fs.readFileSync(path.join(cudaHome(), 'include', file), 'utf8');
  const at = text.search(start);
  if (at < 0) throw new Error(`${file} has no ${start.source}`);
  return text.slice(at, text.indexOf(end, at));
}

function enumerators(body: string, prefix: RegExp): EnumValue[] {
  return [...body.matchAll(new RegExp(`^[\\s,]*(${prefix.source}\\w*)\\s*=\\s*([0-9]+)`, 'gm'))].map((m) => ({
    name: m[1],
    value: Number(m[2]),
  }));
}

/** The runtime's cudaError_t (driver_types.h, enum cudaError), in declaration order. */
export function cudaErrors(): EnumValue[] {
  return enumerators(enumBody('driver_types.h', /^enum __device_builtin__ cudaError$/m, '\n};'), /cuda(?:Success|Error)/);
}

/** The driver's CUresult (cuda.h, enum cudaError_enum), in declaration order. */
export function cuResults(): EnumValue[] {
  return enumerators(enumBody('cuda.h', /^typedef enum cudaError_enum \{$/m, '} CUresult;'), /CUDA_/);
}
