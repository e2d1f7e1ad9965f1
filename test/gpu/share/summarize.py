#!/usr/bin/env python3
"""The sharing benchmark's table (run.sh): DIR (the tenants' JSON lines and
runs.tsv) -> share.json and share.md. A tenant's work is counted against its
mode's solo native rate (qcuda's where no native run was made), so tenants
of different modes add up: the aggregate is the sum of those fractions (1.0:
what one native process alone does), a tenant's share its fraction of that
sum, set against its weight's (weight / sum of weights)."""
import json, os, sys

d, out_json, out_md, provider = sys.argv[1:5]

def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith('{')]
    except (OSError, ValueError):
        return []

runs = []
with open(os.path.join(d, 'runs.tsv')) as f:
    for row in f:
        v, s, specs = row.rstrip('\n').split('\t')
        runs.append((v, s, [dict(zip(('name', 'mode', 'weight', 'procs'), x.split(':'))) for x in specs.split(',')]))

def tenant(v, s, t):
    ls = lines(os.path.join(d, f'{v}.{s}.{t["name"]}.jsonl'))
    finals = [l for l in ls if l.get('final')]
    windows = {}
    for l in ls:
        if 'window' in l:
            windows[l['window']] = windows.get(l['window'], 0) + l['units']
    secs = max([f['seconds'] for f in finals] or [0])
    units = sum(f['units'] for f in finals)
    lat = [f for f in finals if 'p99_us' in f]
    return {'mode': t['mode'], 'weight': int(t['weight']), 'procs': int(t['procs']), 'finished': len(finals),
            'rate': units / secs if secs else 0, 'windows': windows,
            'p50_us': lat[0]['p50_us'] if lat else None, 'p99_us': lat[0]['p99_us'] if lat else None}

solo = {}
for v, s, ts in runs:
    if s.startswith('solo-'):
        solo[(v, ts[0]['mode'])] = tenant(v, s, ts[0])

def solo_of(v, mode):
    for k in ((v, mode), ('native', mode), ('qcuda', mode)):
        if k in solo and solo[k]['rate'] > 0:
            return solo[k]
    return None

result, md = [], []
md.append('| scenario | variant | tenant | mode | weight | procs | vs solo native | share | weight share | worst 1 s window | p50 us | p99 us | p99 vs solo | p99 vs quiet |')
md.append('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
# The latency tenant's p99 beside an idle neighbour (noisy-idle), per variant: what its p99 beside a noisy one is held to.
quiet = {v: t['p99_us'] for v, s, ts in runs if s == 'noisy-idle' for t in [tenant(v, s, x) for x in ts] if t['p99_us']}
for v, s, ts in runs:
    if s.startswith('solo-'):
        continue
    rows = {t['name']: tenant(v, s, t) for t in ts}
    for name, r in rows.items():
        base = solo_of('native', r['mode'])
        r['norm'] = r['rate'] / base['rate'] if base else 0
    agg = sum(r['norm'] for r in rows.values())
    wsum = sum(r['weight'] for r in rows.values())
    nwin = min((len(r['windows']) for r in rows.values()), default=0)
    for name, r in rows.items():
        r['share'] = r['norm'] / agg if agg else 0
        r['target'] = r['weight'] / wsum
        base = solo_of('native', r['mode'])
        # Each 1 s window (all but the last, partial one) the same way: the worst relative distance from the weight's share.
        dev = []
        for k in range(max(0, nwin - 1)):
            n = {x: (rows[x]['windows'].get(k, 0) / solo_of('native', rows[x]['mode'])['rate']) if solo_of('native', rows[x]['mode']) else 0 for x in rows}
            tot = sum(n.values())
            if tot > 0:
                dev.append(abs(n[name] / tot - r['target']) / r['target'])
        r['worst_window_dev'] = max(dev) if dev else None
        lat_solo = solo_of(v if v not in ('share', 'share-mps') else 'qcuda', r['mode'])
        r['p99_vs_solo'] = r['p99_us'] / lat_solo['p99_us'] if r['p99_us'] and lat_solo and lat_solo.get('p99_us') else None
        r['p99_vs_quiet'] = r['p99_us'] / quiet[v] if r['p99_us'] and s.startswith('noisy-') and quiet.get(v) else None
        result.append({'scenario': s, 'variant': v, 'tenant': name, **{k: x for k, x in r.items() if k != 'windows'}})
        fmt = lambda x, f='{:.3f}': '-' if x is None else f.format(x)
        md.append(f"| {s} | {v} | {name} | {r['mode']} | {r['weight']} | {r['procs']} | {r['norm']:.3f} | {r['share']:.3f} | {r['target']:.3f} | "
                  f"{fmt(r['worst_window_dev'], '{:.0%}')} | {fmt(r['p50_us'], '{:.0f}')} | {fmt(r['p99_us'], '{:.0f}')} | {fmt(r['p99_vs_solo'], '{:.2f}')} | {fmt(r['p99_vs_quiet'], '{:.2f}')} |")
    result.append({'scenario': s, 'variant': v, 'aggregate': agg})
    md.append(f'| {s} | {v} | **aggregate** | | | | **{agg:.3f}** | | | | | | | |')
solo_rows = [{'variant': v, 'mode': m, 'rate': r['rate'], 'p50_us': r['p50_us'], 'p99_us': r['p99_us']} for (v, m), r in solo.items()]
with open(out_json, 'w') as f:
    json.dump({'provider': provider, 'solo': solo_rows, 'rows': result}, f, indent=1)
head = [f'Sharing benchmark ({provider} provider). Solo rates (units/s):', '']
head += [f"- {r['variant']} {r['mode']}: {r['rate']:.2f}" + (f", p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us" if r['p99_us'] else '') for r in solo_rows]
head += ['', 'vs solo native: the tenant\'s rate over its mode\'s solo native rate; aggregate: their sum (target >= 0.9). share: its part of the aggregate, against its weight\'s (target +-10%, also per 1 s window). p99 vs solo: the latency tenant beside a neighbour over alone, same variant (share: against qcuda alone); p99 vs quiet: over its p99 beside an idle neighbour (noisy-idle), same variant: the rise the neighbour causes (target <= 1.2).', '']
with open(out_md, 'w') as f:
    f.write('\n'.join(head + md) + '\n')
