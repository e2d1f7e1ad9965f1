// The names a DLL exports or imports (mingw-w64's objdump -p) and a Linux
// library exports (nm -D), for the Wine tests' checks that the Windows
// builds carry what the Linux libraries do.
import { spawnSync } from 'node:child_process';
import path from 'node:path';

/** objdump -p's dump of a PE file: its headers, import and export tables. */
export function objdump(file: string): string {
  return spawnSync('x86_64-w64-mingw32-objdump', ['-p', file], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
}

/** A PE file's exported names, sorted. */
export function dllExports(file: string): string[] {
  return (objdump(file).split('[Ordinal/Name Pointer] Table')[1] ?? '')
    .split('\n\n')[0]
    .split('\n')
    .map((l) => /\]\s+(\S+)$/.exec(l)?.[1])
    .filter((n): n is string => !!n)
    .sort();
}

/** The names a PE file imports from one DLL, sorted. */
export function dllImports(file: string, dll: string): string[] {
  return (objdump(file).split(`DLL Name: ${dll}`)[1] ?? '')
    .split('\n\n')[0]
    .split('\n')
    .map((l) => /^\s+[0-9a-f]+\s+\d+\s+(\S+)$/.exec(l)?.[1])
    .filter((n): n is string => !!n)
    .sort();
}

/** A Linux library's exported names, sorted, without the version node's own symbol (the library's name). */
export function soExports(so: string): string[] {
  return spawnSync('nm', ['-D', '--defined-only', so], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .stdout.split('\n')
    .map((l) => l.split(' ')[2]?.replace(/@.*/, ''))
    .filter((n): n is string => !!n && n !== path.basename(so))
    .sort();
}
