// The backend's module graph, type imports included: no cycles, and nothing
// outside the vhost-user library reaches into it but through its index.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';

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

/** Every relative import and export-from of a file, type-only ones too (dynamic import() and require() too). */
function imports(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;'"]*?from\s*'(\.[^']+)'|(?:import|require)\(\s*'(\.[^']+)'\s*\)|typeof import\('(\.[^']+)'\)/g)]
    .map((m) => m[1] ?? m[2] ?? m[3]);
  return specs.map((s) => resolve(file, s)).filter((p): p is string => p !== undefined);
}

const graph = new Map(files(src).map((f) => [f, imports(f)]));
const rel = (f: string) => path.relative(src, f);

/** Strongly connected groups of more than one module (Tarjan), or a module importing itself. */
function cycles(): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const group: string[] = [];
      let w;
      do {
        w = stack.pop()!;
        on.delete(w);
        group.push(rel(w));
      } while (w !== v);
      if (group.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(group);
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

test('the backend has no import cycles, type imports included', (t) => {
  t.true(graph.size > 40, `${graph.size} modules found`);
  t.deepEqual(cycles(), []);
});

test('outside vhost-user/, the library is imported only through its index', (t) => {
  const lib = path.join(src, 'vhost-user');
  const bad: string[] = [];
  for (const [f, deps] of graph) {
    if (f.startsWith(lib + path.sep)) continue;
    for (const d of deps) if (d.startsWith(lib + path.sep) && d !== path.join(lib, 'index.ts')) bad.push(`${rel(f)} -> ${rel(d)}`);
  }
  t.deepEqual(bad, []);
});
