// The strongly connected groups of a directed graph (Tarjan): the call
// circles of test/guest-lib/layers.test.ts and the import cycles of
// test/cli/imports.test.ts. Every group, one node alone included, in the
// order Tarjan closes them.
export function stronglyConnected<V>(nodes: Iterable<V>, next: (v: V) => Iterable<V>): V[][] {
  let index = 0;
  const idx = new Map<V, number>();
  const low = new Map<V, number>();
  const stack: V[] = [];
  const on = new Set<V>();
  const out: V[][] = [];
  const visit = (v: V): void => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of next(v)) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const group: V[] = [];
      let w: V;
      do {
        w = stack.pop()!;
        on.delete(w);
        group.push(w);
      } while (w !== v);
      out.push(group);
    }
  };
  for (const v of nodes) if (!idx.has(v)) visit(v);
  return out;
}
