// The backend's module graph, type imports included: no cycles, nothing
// outside the vhost-user library reaches into it but through its index, and
// the library reaches nothing outside itself but Node's builtins, the
// packages its package.json names and its own addons; and qcuda's layers
// point one way: commands and the dispatcher above the Provider interface,
// providers below it.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { stronglyConnected } from '../sccs';

const root = path.resolve(__dirname, '..', '..', '..');
const src = path.join(root, 'backend', 'src');

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** A relative import's module file (dir/index.ts for a folder). */
function resolve(from: string, spec: string): string | undefined {
  const base = path.resolve(path.dirname(from), spec);
  for (const p of [`${base}.ts`, path.join(base, 'index.ts')]) if (fs.existsSync(p)) return p;
  return undefined;
}

/** Every import and export-from of a file, type-only ones too (dynamic import() and require() too): the specifiers as written. */
function specifiers(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  return [
    ...text.matchAll(
      /(?:^|\n)\s*(?:import|export)\b[^;'"]*?from\s*'([^']+)'|(?:^|\n)\s*import\s*'([^']+)'|(?:import|require)\(\s*'([^']+)'\s*\)|typeof import\('([^']+)'\)/g,
    ),
  ].map((m) => m[1] ?? m[2] ?? m[3] ?? m[4]);
}

/** Every relative import of a file, as module files. */
function imports(file: string): string[] {
  return specifiers(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => resolve(file, s))
    .filter((p): p is string => p !== undefined);
}

const graph = new Map(files(src).map((f) => [f, imports(f)]));
const rel = (f: string) => path.relative(src, f);
const lib = path.join(src, 'vhost-user');
const inLib = (p: string) => p.startsWith(lib + path.sep);

/** Strongly connected groups of more than one module, or a module importing itself. */
function cycles(): string[][] {
  return stronglyConnected(graph.keys(), (v) => graph.get(v) ?? [])
    .filter((g) => g.length > 1 || (graph.get(g[0]) ?? []).includes(g[0]))
    .map((g) => g.map(rel));
}

test('the backend has no import cycles, type imports included', (t) => {
  t.true(graph.size > 40, `${graph.size} modules found`);
  t.deepEqual(cycles(), []);
});

test('outside vhost-user/, the library is imported only through its index', (t) => {
  const bad: string[] = [];
  for (const [f, deps] of graph) {
    if (inLib(f)) continue;
    for (const d of deps) if (inLib(d) && d !== path.join(lib, 'index.ts')) bad.push(`${rel(f)} -> ${rel(d)}`);
  }
  t.deepEqual(bad, []);
});

// A rule that names a folder or file the tree no longer has would hold of
// nothing: naming one is an error.
function under(dir: string): (f: string) => boolean {
  const prefix = path.join(src, dir) + path.sep;
  if (![...graph.keys()].some((f) => f.startsWith(prefix))) throw new Error(`no module under ${dir}`);
  return (f) => f.startsWith(prefix);
}
function file(name: string): (f: string) => boolean {
  const p = path.join(src, name);
  if (!graph.has(p)) throw new Error(`no module ${name}`);
  return (f) => f === p;
}
const anyOf =
  (...picks: ((f: string) => boolean)[]) =>
  (f: string) =>
    picks.some((pick) => pick(f));

/** Imports of modules `from` picks that land in modules `to` picks, as "from -> to". */
function edges(from: (f: string) => boolean, to: (f: string) => boolean): string[] {
  const out: string[] = [];
  for (const [f, deps] of graph) if (from(f)) for (const d of deps) if (to(d)) out.push(`${rel(f)} -> ${rel(d)}`);
  return out;
}

test('providers never import commands: what both need lives below them (cuda-formats.ts, command.ts)', (t) => {
  t.deepEqual(edges(under('qcuda/providers'), under('qcuda/commands')), []);
});

test('the dispatcher, sessions and commands never import a concrete provider: only the Provider interface (provider.ts)', (t) => {
  // Above the interface. Not so: workers/ (the process topology: a provider
  // in another process), choose-provider.ts (which builds one) and
  // migration/ (the emu provider's objects and the sessions, carried as one
  // state).
  const [qcuda, providers, builders] = [
    under('qcuda'),
    under('qcuda/providers'),
    anyOf(under('qcuda/workers'), under('qcuda/migration'), file('qcuda/choose-provider.ts')),
  ];
  t.deepEqual(
    edges((f) => qcuda(f) && !providers(f) && !builders(f), providers),
    [],
  );
});

test('providers run calls and know nothing of the processes around them: no workers/, virtio-device.ts or session/', (t) => {
  t.deepEqual(edges(under('qcuda/providers'), anyOf(under('qcuda/workers'), file('qcuda/virtio-device.ts'), under('qcuda/session'))), []);
});

test('in qcuda, only workers/ (a worker serves its own queue with a device of its own) and migration/ (its StateCarrier) import the dispatcher (virtio-device.ts)', (t) => {
  const [qcuda, allowed] = [under('qcuda'), anyOf(under('qcuda/workers'), under('qcuda/migration'))];
  t.deepEqual(
    edges((f) => qcuda(f) && !allowed(f), file('qcuda/virtio-device.ts')),
    [],
  );
});

test('the parts of a session see it only through session-core.ts: not session.ts, not one another', (t) => {
  const isPart = anyOf(...['session-memory.ts', 'session-modules.ts', 'session-objects.ts'].map((p) => file(`qcuda/session/${p}`)));
  t.deepEqual(edges(isPart, anyOf(isPart, file('qcuda/session/session.ts'))), []);
});

/** Files directly in a folder of src (not in its subfolders). */
const filesIn = (dir: string) => [...graph.keys()].filter((f) => path.dirname(f) === path.join(src, dir)).map(rel);

test('qcuda is laid out by concept: at most 10 files at its root, the rest in folders', (t) => {
  const root = filesIn('qcuda');
  t.true(root.length <= 10, root.join(', '));
});

test('qcuda imports neither the device registry nor the command line (they choose and inject its provider)', (t) => {
  t.deepEqual(edges(under('qcuda'), anyOf(under('devices'), under('cli'))), []);
});

/**
 * What a library file reaches outside the library: relative paths that leave
 * its folder, packages its package.json does not name, and native addons
 * other than its own (loadAddon('name') or a '.node' file named anywhere
 * but platform/native.ts).
 */
function escapes(file: string, pkg: { dependencies?: Record<string, string>; addons?: string[] }): string[] {
  const out: string[] = [];
  for (const spec of specifiers(file)) {
    if (spec.startsWith('.')) {
      if (!inLib(path.resolve(path.dirname(file), spec))) out.push(spec);
    } else if (!spec.startsWith('node:') && !(spec in (pkg.dependencies ?? {}))) out.push(spec);
  }
  const text = fs.readFileSync(file, 'utf8');
  for (const m of text.matchAll(/loadAddon(?:<[^>]*>)?\(\s*'([^']+)'/g)) if (!(pkg.addons ?? []).includes(m[1])) out.push(`addon ${m[1]}`);
  if (file !== path.join(lib, 'platform', 'native.ts') && /\.node['`]/.test(text)) out.push('a .node file');
  return out;
}

test('vhost-user/ imports only itself, node: builtins, its package.json dependencies and its own addons', (t) => {
  const pkg = JSON.parse(fs.readFileSync(path.join(lib, 'package.json'), 'utf8'));
  t.is(pkg.name, 'vhost-user-ts');
  const root = JSON.parse(fs.readFileSync(path.join(src, '..', '..', 'package.json'), 'utf8'));
  // Each dependency the library names is one the repository installs, at the same version.
  for (const [name, version] of Object.entries(pkg.dependencies ?? {})) t.is(root.dependencies?.[name], version, name);
  const libFiles = [...graph.keys()].filter(inLib);
  t.true(libFiles.length > 15, `${libFiles.length} library modules found`);
  const bad = libFiles.flatMap((f) => escapes(f, pkg).map((e) => `${rel(f)} -> ${e}`));
  t.deepEqual(bad, []);
});
