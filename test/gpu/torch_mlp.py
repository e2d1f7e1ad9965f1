"""PyTorch on CUDA, natively and in a qcuda guest (test/gpu/run.sh runs it
both ways and diffs stdout): tensor creation, elementwise ops, a matmul, and
a small MLP trained for 100 steps on fixed random data (generated on the CPU
from a fixed seed), the loss printed every 10 steps. Timings go to stderr as
one JSON line: the mean training step (after 20 warm-up steps) and the
matmul, with torch.cuda.synchronize() around them; in a qcuda guest also the
round trips to the host per steady step (qcuda_stats of qcuda's
libcuda.so.1, absent from NVIDIA's)."""
import ctypes
import json
import sys
import time

import torch

torch.manual_seed(0)
dev = torch.device('cuda')
print('torch', torch.__version__, 'cuda', torch.version.cuda)
print('cuda available', torch.cuda.is_available(), 'devices', torch.cuda.device_count())
print('device', torch.cuda.get_device_name(0), 'capability', torch.cuda.get_device_capability(0))

a = torch.ones(3, 4, device=dev)
b = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4)
print('ones + arange', (a + b).cpu().tolist())
print('mul, exp, sum', float((a * b).exp().sum().item()))
x = torch.randn(512, 256, generator=torch.Generator().manual_seed(1)).to(dev)
y = torch.randn(256, 384, generator=torch.Generator().manual_seed(2)).to(dev)
torch.cuda.synchronize()
t0 = time.perf_counter()
z = x @ y
torch.cuda.synchronize()
matmul_s = time.perf_counter() - t0
print('matmul 512x256 @ 256x384: sum %.6e, abs max %.6e' % (z.sum().item(), z.abs().max().item()))

g = torch.Generator().manual_seed(3)
data = torch.randn(1024, 64, generator=g).to(dev)
labels = torch.randint(0, 10, (1024,), generator=g).to(dev)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()


def round_trips():
    """(synchronous calls, batches, posted requests) so far, or None natively."""
    stats = getattr(ctypes.CDLL('libcuda.so.1'), 'qcuda_stats', None)
    if stats is None:
        return None
    out = (ctypes.c_ulonglong * 3)()
    stats(out)
    return tuple(out)


step_times = []
trips = {}
for step in range(100):
    if step in (20, 99):
        trips[step] = round_trips()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(model(data), labels)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    step_times.append(time.perf_counter() - t0)
    if step % 10 == 0 or step == 99:
        print('step %3d loss %.7f' % (step, loss.item()))
correct = (model(data).argmax(1) == labels).sum().item()
print('trained: %d of 1024 right' % correct)
steady = step_times[20:]
result = {'step_ms': 1000 * sum(steady) / len(steady), 'matmul_ms': 1000 * matmul_s}
if trips[20] is not None:
    # Steps 20..98, as timed: each with its two torch.cuda.synchronize() and,
    # every 10th, a loss.item().
    n = 99 - 20
    calls, batches, posted = (b - a for a, b in zip(trips[20], trips[99]))
    result['per_step'] = {'round_trips': (calls + batches) / n, 'sync_calls': calls / n,
                          'batches': batches / n, 'posted_requests': posted / n}
print(json.dumps(result), file=sys.stderr)
