"""Prints the workload benchmark's table (markdown) and a JSON result from
workloads.py's output natively and under `qcuda run` in the same run:
  compare-workloads.py NATIVE.json QCUDA.json [OUT.json]
The ratio is qcuda's figure against native's, 1.0 being as fast (for a time,
native / qcuda; for a rate, qcuda / native)."""
import json
import sys

native = json.load(open(sys.argv[1]))
qcuda = json.load(open(sys.argv[2]))
rows, out = [], {}
for name, n in native.items():
    q = qcuda.get(name, {'error': 'not run'})
    if 'error' in n or 'error' in q:
        rows.append(f"| {name} | {n.get('error', n.get('value'))} | {q.get('error', q.get('value'))} | - | - |")
        out[name] = {'native': n, 'qcuda': q}
        continue
    ratio = q['value'] / n['value'] if n.get('higher_is_better') else n['value'] / q['value']
    rt = q.get('round_trips')
    rows.append(f"| {name} ({n['unit']}) | {n['value']:.4g} | {q['value']:.4g} | **{ratio:.3f}** | {'-' if rt is None else f'{rt:.2f}'} |")
    out[name] = {'native': n, 'qcuda': q, 'ratio': ratio}
    if name == 'copies':
        for k in ('pinned_htod', 'pinned_dtoh', 'pageable_htod', 'pageable_dtoh'):
            rows.append(f"| copies {k} (GB/s) | {n[k]:.3g} | {q[k]:.3g} | **{q[k] / n[k]:.3f}** | - |")
print('| workload | native | qcuda run | ratio | round trips/step |')
print('|---|---|---|---|---|')
print('\n'.join(rows))
if len(sys.argv) > 3:
    json.dump(out, open(sys.argv[3], 'w'), indent=1)
