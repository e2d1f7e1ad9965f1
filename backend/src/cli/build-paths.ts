// Where qcuda finds QEMU, the guest kernel and the initramfs when neither an
// option nor the environment names them: the paths the build recorded in its
// checkout (build/qcuda-paths.json, written by make vm, make run and make
// install). QEMU lives outside the checkout, in a cache folder named by a hash
// of its patches, so only the build knows it; with the file, an installed
// qcuda (a launcher on PATH) needs no environment.
import fs from 'node:fs';
import path from 'node:path';

/** The file of the checkout this CLI was built in (dist/backend/src/cli/ -> build/); QCUDA_BUILD_PATHS names another. */
export function buildPathsFile(): string {
  return process.env.QCUDA_BUILD_PATHS || path.resolve(__dirname, '..', '..', '..', '..', 'build', 'qcuda-paths.json');
}

/** The recorded paths, by option name. */
export type BuildPaths = Partial<Record<'qemu' | 'kernel' | 'initrd', string>>;

/** The recorded paths; none when there is no file (nothing built yet); throws with the file's name when it is unreadable. */
export function readBuildPaths(file = buildPathsFile()): BuildPaths {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new Error(`${file}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message} (make vm writes it anew)`);
  }
  const paths: BuildPaths = {};
  if (typeof doc !== 'object' || doc === null) return paths;
  for (const k of ['qemu', 'kernel', 'initrd'] as const) {
    const v = (doc as Record<string, unknown>)[k];
    if (typeof v === 'string' && path.isAbsolute(v)) paths[k] = v;
  }
  return paths;
}

/** Whether a command of this name is on PATH (what a user can type). */
export function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(':').some((dir) => {
    if (!dir) return false;
    try {
      fs.accessSync(path.join(dir, name), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}
