"""The workload benchmark (issue 32): real frameworks' steps, timed the same
way natively and under `qcuda run` (test/gpu/run.sh's workloads part runs
this script both ways, in one run, and compare-workloads.py prints the
table). Each workload warms up, then times REPS batches of steps with a
synchronize at each end and reports the median per step; under qcuda also
the round trips to the host per step (qcuda_stats of qcuda's libcuda.so.1).
Prints one JSON object on stdout: {name: {"unit", "value", "round_trips"}}
(or {"error"}), so a workload that fails does not hide the others; under
qcuda run also the CPU time the backend and its workers spent per step.

  python3 workloads.py [NAME...]   (default: all)
"""
import ctypes
import json
import os
import statistics
import sys
import time
import traceback

REPS = 5

_stats = getattr(ctypes.CDLL('libcuda.so.1'), 'qcuda_stats', None)


def trips():
    """Round trips to the host so far (synchronous calls + batches), or None natively."""
    if _stats is None:
        return None
    out = (ctypes.c_ulonglong * 3)()
    _stats(out)
    return out[0] + out[1]


def backend_cpu():
    """CPU seconds the qcuda backend and its workers (its children) have used, or None natively
    (qcuda run names the backend it started in QCUDA_BACKEND_PID)."""
    pid = os.environ.get('QCUDA_BACKEND_PID')
    if not pid:
        return None
    total = 0
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            f = open(f'/proc/{d}/stat').read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if d == pid or f[1] == pid:  # f[1]: the parent's pid; utime, stime: fields 14, 15
            total += int(f[11]) + int(f[12])
    return total / os.sysconf('SC_CLK_TCK')


LAST = {}


def timed(step, sync, steps, warmup=3):
    """Median seconds per step over REPS batches of `steps` steps, and round trips per step
    (the backend's CPU seconds per step go to LAST['backend_cpu_ms'])."""
    for _ in range(warmup):
        step()
    sync()
    times = []
    t_before, c_before = trips(), backend_cpu()
    for _ in range(REPS):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    t_after, c_after = trips(), backend_cpu()
    rt = None if t_before is None else (t_after - t_before) / (REPS * steps)
    LAST['backend_cpu_ms'] = None if c_before is None else (c_after - c_before) * 1e3 / (REPS * steps)
    return statistics.median(times), rt


def torch_env():
    import torch
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch, torch.device('cuda'), torch.cuda.synchronize


def sgemm():
    torch, dev, sync = torch_env()
    n = 4096
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    s, rt = timed(lambda: torch.mm(a, b), sync, 10)
    return {'unit': 'TFLOP/s', 'value': 2 * n ** 3 / s / 1e12, 'round_trips': rt, 'higher_is_better': True}


def train_step(model, opt, x, y, loss_fn):
    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    return step


def mlp():
    torch, dev, sync = torch_env()
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)
    s, rt = timed(train_step(model, opt, x, y, torch.nn.CrossEntropyLoss()), sync, 50)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt}


def resnet():
    torch, dev, sync = torch_env()
    import torchvision
    model = torchvision.models.resnet18(num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    s, rt = timed(train_step(model, opt, x, y, torch.nn.CrossEntropyLoss()), sync, 10)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt}


def gpt_model():
    torch, dev, sync = torch_env()
    import transformers
    cfg = transformers.GPT2Config(n_layer=4, n_head=8, n_embd=512, vocab_size=8192, n_positions=256)
    return torch, dev, sync, transformers.GPT2LMHeadModel(cfg).to(dev)


def gpt_train():
    torch, dev, sync, model = gpt_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 8192, (8, 128), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
    s, rt = timed(step, sync, 10)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt}


def gpt_decode():
    torch, dev, sync, model = gpt_model()
    model.eval()
    prompt = torch.randint(0, 8192, (1, 16), device=dev)
    new = 64

    def step():
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    s, rt = timed(step, sync, 2, warmup=1)
    # Per token, as the rate is.
    if LAST.get('backend_cpu_ms') is not None:
        LAST['backend_cpu_ms'] /= new
    return {'unit': 'tokens/s', 'value': new / s, 'round_trips': None if rt is None else rt / new, 'higher_is_better': True}


def triton_launch():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out_ptr + i, tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m), mask=m)

    x = torch.randn(4096, device='cuda')
    y = torch.randn(4096, device='cuda')
    out = torch.empty_like(x)
    s, rt = timed(lambda: add[(4,)](x, y, out, 4096, BLOCK=1024), torch.cuda.synchronize, 1000)
    ok = torch.equal(out, x + y)
    return {'unit': 'us/launch', 'value': s * 1e6, 'round_trips': rt, 'correct': ok}


def cupy_elementwise():
    import cupy
    x = cupy.arange(1 << 20, dtype=cupy.float32)
    k = cupy.ElementwiseKernel('float32 x', 'float32 y', 'y = x * 2.0f + 1.0f', 'qcuda_axpb')
    y = cupy.empty_like(x)
    s, rt = timed(lambda: k(x, y), cupy.cuda.Device().synchronize, 1000)
    ok = bool((y[:4] == cupy.asarray([1, 3, 5, 7], dtype=cupy.float32)).all())
    return {'unit': 'us/op', 'value': s * 1e6, 'round_trips': rt, 'correct': ok}


def copies():
    torch, dev, sync = torch_env()
    n = 256 << 20
    d = torch.empty(n, dtype=torch.uint8, device=dev)
    pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
    pageable = torch.empty(n, dtype=torch.uint8)
    pageable.fill_(1)
    r = {}
    for name, h in (('pinned', pinned), ('pageable', pageable)):
        up, _ = timed(lambda: d.copy_(h), sync, 4, warmup=2)
        down, _ = timed(lambda: h.copy_(d), sync, 4, warmup=2)
        r[name] = (n / up / 1e9, n / down / 1e9)
    return {'unit': 'GB/s', 'value': r['pinned'][0], 'higher_is_better': True, 'round_trips': None,
            'pinned_htod': r['pinned'][0], 'pinned_dtoh': r['pinned'][1], 'pageable_htod': r['pageable'][0], 'pageable_dtoh': r['pageable'][1]}


WORKLOADS = {'sgemm': sgemm, 'mlp': mlp, 'resnet': resnet, 'gpt_train': gpt_train, 'gpt_decode': gpt_decode,
             'triton_launch': triton_launch, 'cupy_elementwise': cupy_elementwise, 'copies': copies}

if __name__ == '__main__':
    picked = sys.argv[1:] or list(WORKLOADS)
    results = {}
    for name in picked:
        t0 = time.perf_counter()
        try:
            LAST.clear()
            results[name] = WORKLOADS[name]()
            results[name]['backend_cpu_ms'] = LAST.get('backend_cpu_ms')
        except Exception as e:  # one failing workload must not hide the rest
            traceback.print_exc()
            results[name] = {'error': f'{type(e).__name__}: {e}'}
        print(f'{name}: {results[name]} ({time.perf_counter() - t0:.1f} s)', file=sys.stderr, flush=True)
    print(json.dumps(results))
