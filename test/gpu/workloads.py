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
    (the backend's CPU seconds per step go to LAST['backend_cpu_ms'], this process's, all its
    threads, in microseconds to LAST['client_cpu_us']: above the step's time, the program
    (with qcuda's library in it) is what bounds the step, not the GPU)."""
    for _ in range(warmup):
        step()
    sync()
    times = []
    t_before, c_before, p_before = trips(), backend_cpu(), time.process_time()
    for _ in range(REPS):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    t_after, c_after, p_after = trips(), backend_cpu(), time.process_time()
    LAST['client_cpu_us'] = (p_after - p_before) * 1e6 / (REPS * steps)
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


def host_func():
    """A kernel and a host function (cudaLaunchHostFunc) per step on one stream, as frameworks
    use them to free buffers or signal completion: work after the function waits for it."""
    import cupy
    x = cupy.zeros(1024, dtype=cupy.float32)
    k = cupy.ElementwiseKernel('float32 x', 'float32 y', 'y = x + 1.0f', 'qcuda_inc')
    stream = cupy.cuda.Stream(non_blocking=True)
    ran = [0]

    def fn(arg):
        ran[0] += 1

    def step():
        with stream:
            k(x, x)
        stream.launch_host_func(fn, None)
    s, rt = timed(step, stream.synchronize, 200)
    return {'unit': 'us/op', 'value': s * 1e6, 'round_trips': rt, 'correct': ran[0] > 0}


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


def checksum(t):
    """A digest of a result, the same for the same bytes (native's and qcuda's runs compare it)."""
    return float(t.double().abs().sum().item())


def gemm(dtype, n, tf32=False, batch=0):
    """torch.matmul of n x n random matrices (batch of them if batch): TFLOP/s and a checksum."""
    torch, dev, sync = torch_env()
    torch.backends.cuda.matmul.allow_tf32 = tf32
    shape = (batch, n, n) if batch else (n, n)
    a = torch.randn(*shape, device=dev).to(dtype)
    b = torch.randn(*shape, device=dev).to(dtype)
    steps = max(10, min(200, int(2e12 / (2 * n ** 3 * max(batch, 1)))))  # enough that a synchronize is noise
    s, rt = timed(lambda: torch.matmul(a, b), sync, steps)
    flops = 2 * n ** 3 * max(batch, 1)
    return {'unit': 'TFLOP/s', 'value': flops / s / 1e12, 'round_trips': rt, 'higher_is_better': True,
            'checksum': checksum(torch.matmul(a, b)), 'us': s * 1e6}


def gemm_fp8():
    """FP8 (e4m3) GEMM 8192 through torch._scaled_mm (cuBLASLt), bf16 out."""
    torch, dev, sync = torch_env()
    n = 8192
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=dev)
    mm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    s, rt = timed(mm, sync, 20)
    return {'unit': 'TFLOP/s', 'value': 2 * n ** 3 / s / 1e12, 'round_trips': rt, 'higher_is_better': True,
            'checksum': checksum(mm())}


def gemm_int8():
    torch, dev, sync = torch_env()
    n = 4096
    a = torch.randint(-8, 8, (n, n), device=dev, dtype=torch.int8)
    b = torch.randint(-8, 8, (n, n), device=dev, dtype=torch.int8)
    s, rt = timed(lambda: torch._int_mm(a, b), sync, 20)
    return {'unit': 'TOP/s', 'value': 2 * n ** 3 / s / 1e12, 'round_trips': rt, 'higher_is_better': True,
            'checksum': checksum(torch._int_mm(a, b))}


def resnet50_fp16():
    """fp16 inference of ResNet-50 under autocast, channels-last, batch 64 (cuDNN convolutions)."""
    torch, dev, sync = torch_env()
    import torchvision
    model = torchvision.models.resnet50().to(dev).eval().to(memory_format=torch.channels_last)
    x = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)

    def step():
        with torch.no_grad(), torch.autocast('cuda', dtype=torch.float16):
            return model(x)
    s, rt = timed(step, sync, 10)
    return {'unit': 'images/s', 'value': 64 / s, 'round_trips': rt, 'higher_is_better': True, 'checksum': checksum(step())}


def conv_bf16_train():
    """cuDNN convolutions forward and backward in bf16, NCHW and NHWC."""
    torch, dev, sync = torch_env()
    conv = torch.nn.Conv2d(128, 128, 3, padding=1).to(dev).to(torch.bfloat16)
    xs = [torch.randn(32, 128, 56, 56, device=dev, dtype=torch.bfloat16, requires_grad=True),
          torch.randn(32, 128, 56, 56, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last).requires_grad_()]

    def step():
        for x in xs:
            conv(x).sum().backward()
    s, rt = timed(step, sync, 10)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt, 'checksum': checksum(conv(xs[1]))}


def llm_decode_fp16():
    """Greedy decode of a 350M-parameter GPT-2 (transformers config, random weights) in fp16, batch 8."""
    torch, dev, sync = torch_env()
    import transformers
    cfg = transformers.GPT2Config(n_layer=24, n_head=16, n_embd=1024, vocab_size=50257, n_positions=1024)
    model = transformers.GPT2LMHeadModel(cfg).to(dev).half().eval()
    prompt = torch.randint(0, 50257, (8, 32), device=dev)
    new = 32
    out = {}

    def step():
        with torch.no_grad():
            out['ids'] = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    s, rt = timed(step, sync, 2, warmup=1)
    if LAST.get('backend_cpu_ms') is not None:
        LAST['backend_cpu_ms'] /= new
    return {'unit': 'tokens/s', 'value': 8 * new / s, 'round_trips': None if rt is None else rt / new,
            'higher_is_better': True, 'checksum': float(out['ids'].double().sum().item())}


def gpt_train_bf16():
    """A small GPT-2 trained under bf16 autocast (losses compared through the checksum)."""
    torch, dev, sync, model = gpt_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 8192, (8, 128), device=dev)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    s, rt = timed(step, sync, 10)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt, 'checksum': float(torch.stack(losses[:5]).sum().item())}


def sdpa_bf16():
    """Flash attention (SDPA) forward + backward in bf16."""
    torch, dev, sync = torch_env()
    q, k, v = (torch.randn(8, 16, 1024, 64, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    step = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    s, rt = timed(step, sync, 20)
    return {'unit': 'ms/step', 'value': s * 1e3, 'round_trips': rt}


def graph_replay():
    """One captured CUDA graph of 16 small kernels, replayed (torch.cuda.CUDAGraph)."""
    torch, dev, sync = torch_env()
    x = torch.randn(1 << 16, device=dev)
    g = torch.cuda.CUDAGraph()
    s_ = torch.cuda.Stream()
    s_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s_):
        y = x * 1.0
        for _ in range(3):
            y = y * 1.0001
    torch.cuda.current_stream().wait_stream(s_)
    with torch.cuda.graph(g):
        y = x * 1.0
        for _ in range(15):
            y = y * 1.0001 + 0.5
    s, rt = timed(g.replay, sync, 200)
    return {'unit': 'us/replay', 'value': s * 1e6, 'round_trips': rt, 'checksum': checksum(y)}


def graph_bf16():
    """A bf16 GEMM of 1024 and a GELU captured in a CUDA graph (cuBLASLt's cluster kernels in graph nodes), replayed."""
    torch, dev, sync = torch_env()
    a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    s_ = torch.cuda.Stream()
    s_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s_):
        for _ in range(3):
            y = torch.nn.functional.gelu(a @ b)
    torch.cuda.current_stream().wait_stream(s_)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = torch.nn.functional.gelu(a @ b)
    s, rt = timed(g.replay, sync, 200)
    return {'unit': 'us/replay', 'value': s * 1e6, 'round_trips': rt, 'checksum': checksum(y)}


def compile_graphs():
    """torch.compile(mode='reduce-overhead'): an MLP run as CUDA graphs."""
    torch, dev, sync = torch_env()
    model = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]).to(dev)
    f = torch.compile(model, mode='reduce-overhead')
    x = torch.randn(64, 256, device=dev)
    with torch.no_grad():
        for _ in range(5):
            f(x)
        s, rt = timed(lambda: f(x), sync, 200)
        return {'unit': 'us/call', 'value': s * 1e6, 'round_trips': rt, 'checksum': checksum(f(x))}


def event_query():
    """cudaEventRecord + cudaEventQuery on an idle stream."""
    torch, dev, sync = torch_env()
    e = torch.cuda.Event()
    step = lambda: (e.record(), e.query())
    s, rt = timed(step, sync, 2000)
    return {'unit': 'us/op', 'value': s * 1e6, 'round_trips': rt}


def jax_matmul():
    import jax
    import jax.numpy as jnp
    a = jax.random.normal(jax.random.PRNGKey(0), (1024, 1024))
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    s, rt = timed(lambda: f(a), lambda: f(a).block_until_ready(), 100)
    return {'unit': 'ms/op', 'value': s * 1e3, 'round_trips': rt, 'checksum': float(jnp.abs(f(a)).sum())}


WORKLOADS = {'sgemm': sgemm, 'mlp': mlp, 'resnet': resnet, 'gpt_train': gpt_train, 'gpt_decode': gpt_decode,
             'triton_launch': triton_launch, 'cupy_elementwise': cupy_elementwise, 'copies': copies,
             # issue 43: the libraries at native speed, in half precision too
             'gemm_bf16_8192': lambda: gemm(torch_env()[0].bfloat16, 8192),
             'gemm_fp16_4096': lambda: gemm(torch_env()[0].float16, 4096),
             'gemm_fp16_1024': lambda: gemm(torch_env()[0].float16, 1024),
             'gemm_fp32_4096': lambda: gemm(torch_env()[0].float32, 4096),
             'gemm_tf32_4096': lambda: gemm(torch_env()[0].float32, 4096, tf32=True),
             'gemm_fp32_1024': lambda: gemm(torch_env()[0].float32, 1024),
             'gemm_bf16_batched': lambda: gemm(torch_env()[0].bfloat16, 1024, batch=16),
             'gemm_fp8_8192': gemm_fp8, 'gemm_int8_4096': gemm_int8,
             'resnet50_fp16': resnet50_fp16, 'conv_bf16_train': conv_bf16_train, 'llm_decode_fp16': llm_decode_fp16,
             'gpt_train_bf16': gpt_train_bf16, 'sdpa_bf16': sdpa_bf16, 'graph_replay': graph_replay,
             'compile_graphs': compile_graphs, 'graph_bf16': graph_bf16, 'event_query': event_query, 'jax_matmul': jax_matmul,
             'host_func': host_func}

if __name__ == '__main__':
    picked = sys.argv[1:] or list(WORKLOADS)
    results = {}
    for name in picked:
        t0 = time.perf_counter()
        try:
            LAST.clear()
            results[name] = WORKLOADS[name]()
            results[name]['backend_cpu_ms'] = LAST.get('backend_cpu_ms')
            results[name]['client_cpu_us'] = LAST.get('client_cpu_us')
        except Exception as e:  # one failing workload must not hide the rest
            traceback.print_exc()
            results[name] = {'error': f'{type(e).__name__}: {e}'}
        print(f'{name}: {results[name]} ({time.perf_counter() - t0:.1f} s)', file=sys.stderr, flush=True)
    print(json.dumps(results))
