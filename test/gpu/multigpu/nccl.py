# NCCL in a process group of torchrun (issue 37, docs/multi-gpu.md "NCCL:
# what it needs"): (a) DDP training of a small deterministic model, the loss
# of every step and the mean step time after warm-up; (b) an all-reduce sweep
# (sum of float32) from 8 B to 1 GiB in powers of 8, the bus bandwidth of each
# size as nccl-tests defines it (algbw * 2(n-1)/n), after a check of the sum.
# Run by test/gpu/multigpu/run-nccl.sh:
#   torchrun --standalone --nproc_per_node=2 nccl.py --out=FILE.json
# Rank 0 prints what it measures and writes FILE.json.
import argparse
import datetime
import json
import os
import sys
import time

# Deterministic cuBLAS (torch.use_deterministic_algorithms asks for it).
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def log(rank, *a):
    if rank == 0:
        print(*a, flush=True)


def train(rank, world, dev, steps, warmup):
    torch.manual_seed(1234)  # the same initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(dev)
    ddp = DDP(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    xs = torch.randn(steps, 64, 256, generator=g).to(dev)
    ys = torch.randint(0, 10, (steps, 64), generator=g).to(dev)
    losses, times = [], []
    for i in range(steps):
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(xs[i]), ys[i])
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        # The mean of the ranks' losses: what both ranks agree on.
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        v = mean.item()
        times.append(time.perf_counter() - t0)
        losses.append(round(v, 6))
        log(rank, f'step {i} loss {v:.6f}')
    step_ms = 1000 * sum(times[warmup:]) / max(1, len(times[warmup:]))
    log(rank, f'mean step time after {warmup} warm-up steps: {step_ms:.3f} ms')
    return losses, step_ms


def sweep(rank, world, dev, max_bytes):
    rows = []
    size = 8
    while size <= max_bytes:
        n = size // 4
        x = torch.full((n,), float(rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        ok = bool(torch.all(x == want).item())
        iters = 40 if size <= (1 << 20) else 20 if size <= (1 << 27) else 5
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize(dev)
        dist.barrier(device_ids=[dev.index])
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize(dev)
        sec = (time.perf_counter() - t0) / iters
        algbw = size / sec / 1e9
        busbw = algbw * 2 * (world - 1) / world
        rows.append({'bytes': size, 'us': sec * 1e6, 'algbw_GBs': algbw, 'busbw_GBs': busbw, 'sum_ok': ok})
        log(rank, f'allreduce {size:>11} B  {sec * 1e6:12.1f} us  algbw {algbw:8.3f} GB/s  busbw {busbw:8.3f} GB/s  sum {"ok" if ok else "WRONG"}')
        del x
        size *= 8
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--steps', type=int, default=50)
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--max-bytes', type=int, default=1 << 30)
    a = ap.parse_args()
    rank, world, local = int(os.environ['RANK']), int(os.environ['WORLD_SIZE']), int(os.environ['LOCAL_RANK'])
    dev = torch.device('cuda', local)
    torch.cuda.set_device(dev)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    t0 = time.perf_counter()
    # device_id: NCCL's communicator is made here, not at the first collective.
    dist.init_process_group('nccl', device_id=dev, timeout=datetime.timedelta(seconds=90))
    dist.barrier(device_ids=[local])
    init_s = time.perf_counter() - t0
    log(rank, f'torch {torch.__version__} cuda {torch.version.cuda} nccl {".".join(map(str, torch.cuda.nccl.version()))} world {world}; init {init_s:.2f} s')
    result = {'world': world, 'torch': torch.__version__, 'nccl': list(torch.cuda.nccl.version()), 'init_s': init_s}
    result['losses'], result['step_ms'] = train(rank, world, dev, a.steps, a.warmup)
    result['allreduce'] = sweep(rank, world, dev, a.max_bytes) if a.max_bytes >= 8 else []
    dist.barrier(device_ids=[local])
    dist.destroy_process_group()
    if rank == 0:
        with open(a.out, 'w') as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
