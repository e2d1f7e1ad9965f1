#!/usr/bin/env node
// qcuda-backend: the vhost-user backend program, following the vhost-user
// spec's "backend program conventions" (--socket-path, --fd,
// --print-capabilities; exits cleanly on SIGTERM).
import { parseArgs } from 'node:util';
import { DEVICES } from '../devices';
import { parseSize, type ProviderKind } from '../qcuda/providers';
import { VhostUserServer } from '../vhost-user/server';

const HELP = `Usage: qcuda-backend (--socket-path=PATH | --fd=FDNUM) [options]

Serves a virtio device to QEMU over vhost-user.

  --socket-path=PATH      listen on this unix socket (an old socket file there
                          is replaced; it is removed on exit). The backend keeps
                          listening after a frontend disconnects, so QEMU can
                          reconnect (-chardev socket,...,reconnect-ms=N).
  --fd=FDNUM              serve an already connected socket inherited as FDNUM;
                          exit when it closes.
  --device=NAME           the device to serve (default qcuda):
${Object.entries(DEVICES).map(([n, d]) => `                            ${n.padEnd(8)}${d.describe}`).join('\n')}
  --queues=N              request queues (default 4; must match QEMU's num-queues)
  --provider=KIND         qcuda only: what runs the CUDA calls (default auto):
                            cuda    the GPU, through the CUDA driver (libcuda.so.1)
                            host    device memory emulated in host RAM (no kernels)
                            auto    cuda where a GPU answers, else host
  --gpu=N                 qcuda only: which GPU (default 0)
  --isolation=MODE        qcuda with the cuda provider: where each guest
                          process's CUDA context runs (default process):
                            process  a worker process per guest process: a
                                     kernel fault (which poisons every CUDA
                                     context of the process it happens in)
                                     ends only that guest process's context
                            none     all in this process: one message hop
                                     less per call, but one guest process's
                                     kernel fault ends CUDA for all of the VM
  --device-memory-limit=SIZE
                          qcuda only: per-VM device memory quota (e.g. 2G);
                          cudaMalloc past it fails with cudaErrorMemoryAllocation
                          and cudaMemGetInfo reports the quota
  --print-capabilities    print the backend's capabilities as JSON and exit
  -h, --help              this text

Logging: DEBUG=qcuda:* for protocol traces. Exit status: 0 on SIGTERM/SIGINT
or when an --fd connection ends, 2 on bad usage, 1 on a startup error.`;

function usage(msg: string): never {
  process.stderr.write(`qcuda-backend: ${msg}\nTry 'qcuda-backend --help'.\n`);
  process.exit(2);
}

function positiveInt(name: string, v: string | undefined, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  if (!/^\d+$/.test(v) || +v < 1 || +v > max) usage(`--${name} must be an integer in 1..${max}, got '${v}'`);
  return +v;
}

function nonNegativeInt(name: string, v: string, max: number): number {
  if (!/^\d+$/.test(v) || +v > max) usage(`--${name} must be an integer in 0..${max}, got '${v}'`);
  return +v;
}

async function main(): Promise<void> {
  let args;
  try {
    args = parseArgs({
      options: {
        'socket-path': { type: 'string' },
        fd: { type: 'string' },
        device: { type: 'string', default: 'qcuda' },
        queues: { type: 'string' },
        provider: { type: 'string', default: 'auto' },
        gpu: { type: 'string' },
        isolation: { type: 'string', default: 'process' },
        'device-memory-limit': { type: 'string' },
        'print-capabilities': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (e) {
    usage((e as Error).message);
  }
  if (args.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const kind = DEVICES[args.device!];
  if (!kind) usage(`unknown device '${args.device}' (known: ${Object.keys(DEVICES).join(', ')})`);
  if (args['print-capabilities']) {
    process.stdout.write(`${JSON.stringify({ type: args.device })}\n`);
    return;
  }
  if ((args['socket-path'] === undefined) === (args.fd === undefined)) usage('give exactly one of --socket-path and --fd');
  if (!['cuda', 'host', 'auto'].includes(args.provider!)) usage(`--provider must be cuda, host or auto, got '${args.provider}'`);
  if (!['process', 'none'].includes(args.isolation!)) usage(`--isolation must be process or none, got '${args.isolation}'`);
  let memoryLimit: bigint | undefined;
  try {
    memoryLimit = args['device-memory-limit'] === undefined ? undefined : parseSize(args['device-memory-limit']);
  } catch (e) {
    usage(`--device-memory-limit: ${(e as Error).message}`);
  }
  const gpu = args.gpu === undefined ? 0 : nonNegativeInt('gpu', args.gpu, 63);
  const queues = positiveInt('queues', args.queues, 4, 64);
  let server: VhostUserServer;
  try {
    const device = await kind.create({
      queues, provider: args.provider as ProviderKind, gpu, memoryLimit, isolation: args.isolation as 'process' | 'none',
      log: (line) => process.stderr.write(`qcuda-backend: ${line}\n`),
    });
    if (args.fd !== undefined) {
      const fd = positiveInt('fd', args.fd, 0, 1 << 20);
      server = VhostUserServer.fromConnectedFd(fd, device, { onDisconnect: () => shutdown(0) });
    } else {
      server = VhostUserServer.listen(args['socket-path']!, device);
      process.stderr.write(`qcuda-backend: ${device.name} device listening on ${args['socket-path']}\n`);
    }
  } catch (e) {
    process.stderr.write(`qcuda-backend: ${(e as Error).message}\n`);
    process.exit(1);
  }
  function shutdown(code: number): void {
    server.close();
    process.exit(code);
  }
  process.on('SIGTERM', () => shutdown(0));
  process.on('SIGINT', () => shutdown(0));
}

main().catch((e) => {
  process.stderr.write(`qcuda-backend: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
