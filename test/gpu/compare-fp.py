#!/usr/bin/env python3
"""compare-fp.py A B [RTOL]: compares two programs' outputs line by line;
numbers may differ by RTOL relative (default 1e-5: float32 results of GPU
reductions whose order is not fixed), everything else must be equal. Prints
one line: "identical", "within tolerance RTOL: N numbers differ, largest
relative difference X" (exit 0), or the first differing line (exit 1)."""
import re
import sys

NUM = re.compile(r'-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+')

a = open(sys.argv[1]).read().splitlines()
b = open(sys.argv[2]).read().splitlines()
rtol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
if len(a) != len(b):
    print(f'different: {len(a)} lines against {len(b)}')
    sys.exit(1)
differ, worst = 0, 0.0
for i, (x, y) in enumerate(zip(a, b), 1):
    if x == y:
        continue
    if NUM.sub('#', x) != NUM.sub('#', y):
        print(f'different at line {i}: {x!r} against {y!r}')
        sys.exit(1)
    for u, v in zip(NUM.findall(x), NUM.findall(y)):
        fu, fv = float(u), float(v)
        rel = abs(fu - fv) / max(abs(fu), abs(fv), 1e-30)
        if rel > rtol:
            print(f'different at line {i}: {u} against {v} (relative {rel:.1e} > {rtol:g})')
            sys.exit(1)
        if fu != fv:
            differ += 1
            worst = max(worst, rel)
print('identical' if differ == 0 else f'within tolerance {rtol:g}: {differ} numbers differ, largest relative difference {worst:.1e}')
