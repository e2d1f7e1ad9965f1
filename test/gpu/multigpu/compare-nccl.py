# test/gpu/multigpu/run-nccl.sh's table: nccl.py's results natively and
# under qcuda run side by side (losses, step time, all-reduce bus bandwidth
# per size and the ratio qcuda / native), and the same as one JSON.
#   python3 compare-nccl.py NATIVE.json QCUDA.json OUT.json
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f'{path}: no result ({e})')
        return None


def main(native_path, qcuda_path, out_path):
    n, q = load(native_path), load(qcuda_path)
    out = {'native': n, 'qcuda': q}
    if n and q:
        nl, ql = n['losses'], q['losses']
        diff = max((abs(a - b) for a, b in zip(nl, ql)), default=None)
        same_len = len(nl) == len(ql)
        out['loss_max_abs_diff'] = diff
        print(f'losses: {len(nl)} steps native, {len(ql)} under qcuda; max abs diff {diff}' + ('' if same_len else ' (step counts differ)'))
        print(f'first/last loss: native {nl[0]:.6f}/{nl[-1]:.6f}, qcuda {ql[0]:.6f}/{ql[-1]:.6f}')
        out['step_ms_ratio'] = n['step_ms'] / q['step_ms'] if q['step_ms'] else None
        print(f"DDP step: native {n['step_ms']:.3f} ms, qcuda {q['step_ms']:.3f} ms (native/qcuda {out['step_ms_ratio']:.3f})")
        print(f"init (process group + NCCL communicator): native {n['init_s']:.2f} s, qcuda {q['init_s']:.2f} s")
        rows = []
        print(f"{'bytes':>11} {'native GB/s':>12} {'qcuda GB/s':>12} {'ratio':>7} {'native us':>11} {'qcuda us':>11}  sum")
        byq = {r['bytes']: r for r in q['allreduce']}
        for r in n['allreduce']:
            s = byq.get(r['bytes'])
            ratio = s['busbw_GBs'] / r['busbw_GBs'] if s and r['busbw_GBs'] else None
            rows.append({'bytes': r['bytes'], 'native_busbw': r['busbw_GBs'], 'qcuda_busbw': s and s['busbw_GBs'], 'ratio': ratio})
            ok = 'ok' if r['sum_ok'] and s and s['sum_ok'] else 'WRONG' if s else '-'
            print(
                f"{r['bytes']:>11} {r['busbw_GBs']:>12.3f} {s['busbw_GBs'] if s else float('nan'):>12.3f} "
                f"{ratio if ratio else float('nan'):>7.3f} {r['us']:>11.1f} {s['us'] if s else float('nan'):>11.1f}  {ok}"
            )
        out['busbw'] = rows
    elif n:
        print(f"native only: step {n['step_ms']:.3f} ms; busbw at 1 GiB {n['allreduce'][-1]['busbw_GBs'] if n['allreduce'] else 0:.3f} GB/s")
    with open(out_path, 'w') as f:
        json.dump(out, f, indent=1)
    print(f'written: {out_path}')


if __name__ == '__main__':
    main(*sys.argv[1:4])
