"""One small job per name, for the tracer (docs/tracing.md): run natively and
under qcuda run with qcuda-trace, then trace-diff.py names every driver
answer that differs. Prints the job's result digest, so the two runs'
outputs can be compared too.

  python3 trace_jobs.py bf16|fp16|fp32|conv|graph|event|jax

Each job imports only the framework it uses (the jax job loads no PyTorch).
"""
import sys

torch = dev = None


def torch_env():
    global torch, dev
    import torch as t
    torch = t
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda')


def gemm(dtype):
    torch_env()
    dtype = getattr(torch, dtype)
    a = torch.randn(4096, 4096, device=dev).to(dtype)
    b = torch.randn(4096, 4096, device=dev).to(dtype)
    return torch.matmul(a, b)


def conv():
    torch_env()
    m = torch.nn.Conv2d(64, 64, 3, padding=1).to(dev).half().to(memory_format=torch.channels_last)
    x = torch.randn(16, 64, 56, 56, device=dev).half().to(memory_format=torch.channels_last).requires_grad_()
    y = m(x)
    y.sum().backward()
    return y


def graph():
    torch_env()
    x = torch.randn(1 << 16, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 1.0
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = x * 1.0
        for _ in range(15):
            y = y * 1.0001 + 0.5
    for _ in range(3):
        g.replay()
    return y


def event():
    # The calls behind workloads.py's event_query step, 50 times over: which
    # of them cross the wire on their own under qcuda shows in the trace.
    e = torch.cuda.Event()
    x = torch.ones(4, device=dev)
    for _ in range(50):
        e.record()
        e.query()
    return x


def jax_matmul():
    # workloads.py's jax_matmul, 20 steps: what XLA asks of the driver per
    # step (launches, events, host functions), natively and under qcuda.
    import jax
    import jax.numpy as jnp
    a = jax.random.normal(jax.random.PRNGKey(0), (1024, 1024))
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    for _ in range(20):
        y = f(a)
    y.block_until_ready()
    return float(jnp.abs(y).sum())


def digest(out):
    if isinstance(out, float):
        return out
    torch.cuda.synchronize()
    return out.double().abs().sum().item()


JOBS = {'bf16': lambda: gemm('bfloat16'), 'fp16': lambda: gemm('float16'), 'fp32': lambda: gemm('float32'),
        'conv': conv, 'graph': graph, 'event': event, 'jax': jax_matmul}

print(f'{sys.argv[1]}: {digest(JOBS[sys.argv[1]]()):.10g}')
