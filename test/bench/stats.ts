// Shared by the benchmarks: percentiles and the table + JSON report.
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export interface Row {
  what: string;
  value: number;
  unit: string;
  baseline?: number;
  /** value / baseline, or baseline / value when lower is worse. */
  ratio?: number;
}

export function report(name: string, rows: Row[], extra: Record<string, unknown> = {}): void {
  const w = Math.max(...rows.map((r) => r.what.length), 4);
  console.log(`\n${name}`);
  console.log(`${'what'.padEnd(w)}  ${'value'.padStart(12)}  ${'baseline'.padStart(12)}  ${'ratio'.padStart(7)}`);
  for (const r of rows) {
    const f = (n: number | undefined) => (n === undefined ? '' : n.toFixed(n >= 100 ? 0 : 2));
    console.log(
      `${r.what.padEnd(w)}  ${`${f(r.value)} ${r.unit}`.padStart(12)}  ${f(r.baseline).padStart(12)}  ${(r.ratio === undefined ? '' : r.ratio.toFixed(2)).padStart(7)}`,
    );
  }
  console.log(`JSON ${JSON.stringify({ bench: name, rows, ...extra })}`);
}
