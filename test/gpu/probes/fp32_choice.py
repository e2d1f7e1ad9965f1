"""fp32 and TF32 GEMM rates, for finding what makes cuBLAS choose its kernel
(docs/performance.md): run natively, under qcuda-trace with
QCUDA_TRACE_REFUSE=TAG (a private table refused), and under qcuda run; a
rate that drops to qcuda's names the table the choice depends on.

  python3 fp32_choice.py [n]
"""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
dev = torch.device('cuda')
a = torch.randn(n, n, device=dev)
b = torch.randn(n, n, device=dev)


def rate(tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        c = torch.matmul(a, b)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / reps
    return 2 * n**3 / dt / 1e12, c.double().abs().sum().item()


fp32, s32 = rate(False)
tf32, s_tf = rate(True)
print(f'fp32 {n}: {fp32:.1f} TFLOP/s (sum {s32:.6g}); tf32: {tf32:.1f} TFLOP/s (sum {s_tf:.6g})')
