"""Prints the workload benchmark's table (markdown) and writes its JSON from
workloads.py's outputs, natively and under `qcuda run`, several rounds of
each taken alternately in one run (the machine's noise moves both alike):
  compare-workloads.py OUT.json NATIVE1.json QCUDA1.json [NATIVE2.json QCUDA2.json ...]
Each figure is the median over the rounds. The ratio is qcuda's against
native's, 1.0 being as fast (for a time, native / qcuda; for a rate,
qcuda / native)."""
import json
import statistics
import sys

out_file, files = sys.argv[1], sys.argv[2:]
rounds = [(json.load(open(files[i])), json.load(open(files[i + 1]))) for i in range(0, len(files) - 1, 2)]
COPIES = ('pinned_htod', 'pinned_dtoh', 'pageable_htod', 'pageable_dtoh')


def median(side, name, key):
    vals = [r[side][name][key] for r in rounds if name in r[side] and key in r[side][name] and r[side][name][key] is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec='.3g'):
    return '-' if v is None else format(v, spec)


def result_matches(name):
    """'same' when every round's checksum under qcuda equals native's of that round, else the first pair; '-' without one."""
    pairs = [(r[0][name].get('checksum'), r[1][name].get('checksum')) for r in rounds if name in r[0] and name in r[1]]
    pairs = [p for p in pairs if p[0] is not None]
    if not pairs:
        return '-'
    bad = [p for p in pairs if p[0] != p[1]]
    return 'same' if not bad else f'DIFFERS ({bad[0][0]:.8g} vs {bad[0][1]:.8g})'


rows, out = [], {'rounds': len(rounds)}
for name, first in rounds[0][0].items():
    errors = [r[s][name]['error'] for r in rounds for s in (0, 1) if 'error' in r[s].get(name, {'error': 'not run'})]
    if errors:
        rows.append(f'| {name} | failed: {errors[0]} | | | | | | |')
        out[name] = {'error': errors[0]}
        continue
    n, q = median(0, name, 'value'), median(1, name, 'value')
    ratio = q / n if first.get('higher_is_better') else n / q
    rt, cpu = median(1, name, 'round_trips'), median(1, name, 'backend_cpu_ms')
    # The program's own CPU time per step (all its threads), natively and under qcuda.
    ncpu, qcpu = median(0, name, 'client_cpu_us'), median(1, name, 'client_cpu_us')
    same = result_matches(name)
    rows.append(f"| {name} ({first['unit']}) | {n:.4g} | {q:.4g} | **{ratio:.3f}** | {fmt(rt, '.2f')} | {fmt(cpu, '.3f')} | "
                f"{fmt(ncpu, '.1f')} / {fmt(qcpu, '.1f')} | {same} |")
    out[name] = {'unit': first['unit'], 'native': n, 'qcuda': q, 'ratio': ratio, 'round_trips_per_step': rt, 'backend_cpu_ms_per_step': cpu,
                 'client_cpu_us_per_step': {'native': ncpu, 'qcuda': qcpu}, 'same_result': same}
    if name == 'copies':
        for k in COPIES:
            kn, kq = median(0, name, k), median(1, name, k)
            rows.append(f'| copies {k} (GB/s) | {kn:.3g} | {kq:.3g} | **{kq / kn:.3f}** | - | - | - | - |')
            out[f'copies_{k}'] = {'unit': 'GB/s', 'native': kn, 'qcuda': kq, 'ratio': kq / kn}
print(f'| workload | native | qcuda run | ratio | round trips/step | backend CPU ms/step | program CPU us/step native / qcuda | result |'
      f'  (median of {len(rounds)} rounds)')
print('|---|---|---|---|---|---|---|---|')
print('\n'.join(rows))
json.dump(out, open(out_file, 'w'), indent=1)
