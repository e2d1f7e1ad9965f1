// The cuda provider on a GPU, hardening (issue 11): the cases only a GPU can
// show. A faulting or endless kernel ends only its worker, guest RAM out of
// a kernel's reach, hostile module images.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../../backend/src/sys/native';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import type { ProviderContext } from '../../backend/src/qcuda/provider';
import { createCudaProvider } from '../../backend/src/qcuda/providers/cuda/cuda';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { prng, promised } from '../helpers';
import { kernelsFatbin, MiB, provider, rejectsWith } from './cuda-provider-fixtures';

/** Registered in order by cuda-provider.test.ts. */
export function hardeningTests(): void {
  // Before the known failure (cuda-provider-isolation-none.ts), which poisons this process's CUDA.
  test.serial(
    'isolated sessions: an illegal address ends only the faulting worker; the other session and new ones keep working',
    async (t) => {
      const image = kernelsFatbin(t);
      if (!image) return;
      const size = 8 * MiB;
      const fd = native.memfdCreate('qcuda-isolated-test', size);
      const m = new native.Mapping(fd, size, 0);
      const view = new Uint8Array(m.window(0, size));
      const local = await createCudaProvider(0);
      const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
      try {
        await iso.registerGuestMemory(m.address, BigInt(size), {
          fd,
          region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n },
        });
        native.close(fd); // the provider keeps a dup for its workers
        const t0 = Date.now();
        const good = await iso.openContext(0);
        t.log(`a cuda worker starts in ${Date.now() - t0} ms (node, cuInit, contexts; guest RAM registration goes on after)`);
        const bad = await iso.openContext(0);
        const gm = (await good.moduleLoad(image)).ref;
        const bump = await good.functionGet(gm, 'bump', 256);
        const counter = await good.variableGet(gm, 'counter');
        const bm = (await bad.moduleLoad(image)).ref;
        const crash = await bad.functionGet(bm, 'crash', 256);
        const x = await bad.malloc(64n);
        const p = new DataView(new ArrayBuffer(8));
        p.setBigUint64(0, x, true);
        await bad.launch(crash.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer));
        await rejectsWith(t, () => bad.synchronize(), CudaErr.IllegalAddress);
        await rejectsWith(t, () => bad.malloc(64n), CudaErr.IllegalAddress, /illegal/i);
        // the other session: a launch, a synchronize and a copy of what the kernel wrote
        await good.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([5]).buffer));
        await good.synchronize();
        await good.copyFromDevice([{ addr: m.address, len: 16, view: view.subarray(0, 16) }], counter.dptr, undefined);
        t.deepEqual([...new Int32Array(view.buffer.slice(0, 16))], [6, 7, 8, 9], "the other session's kernel ran and its result came back");
        await bad.destroy();
        const fresh = await iso.openContext(0);
        await fresh.moduleUnload((await fresh.moduleLoad(image)).ref);
        t.pass('a session opened after the fault loads a module');
        t.true((await local.primary.memGetInfo()).free > 0n, "the backend's own context still answers memGetInfo");
        await fresh.destroy();
        await good.destroy();
      } finally {
        await iso.close();
        m.unmap();
      }
    },
  );

  // ---- hardening (issue 11): the cases only a GPU can show

  test.serial('a session ended with a kernel that never ends: its worker is killed and its memory is back within seconds', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const local = await createCudaProvider(0);
    const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
    try {
      const f0 = (await local.primary.memGetInfo()).free;
      const x = await iso.openContext(0);
      await x.free(await x.malloc(1n));
      const f1 = (await local.primary.memGetInfo()).free;
      t.log(`one session's context (its worker's, before any module): ${(f0 - f1) >> 20n} MiB of device memory the quota does not count`);
      const spin = await x.functionGet((await x.moduleLoad(image)).ref, 'spin', 256);
      const before = (await local.primary.memGetInfo()).free;
      const GiB = 1n << 30n;
      await x.malloc(GiB);
      const flag = await x.malloc(4n);
      await x.memset(flag, 0, 4n, undefined, false);
      const p = new DataView(new ArrayBuffer(8));
      p.setBigUint64(0, flag, true);
      await x.launch(spin.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer));
      const sync = promised(() => x.synchronize()).then(
        () => 'returned',
        (e: Error) => e.message,
      );
      const held = (await local.primary.memGetInfo()).free;
      t.true(before - held >= GiB, `the session holds its 1 GiB (${before - held} bytes)`);
      const t0 = Date.now();
      await x.destroy('exit'); // the guest process is gone (SESSION_CLOSE)
      let free = held;
      while (Date.now() - t0 < 20_000 && free < before - 64n * BigInt(MiB)) {
        await new Promise((r) => setTimeout(r, 50));
        free = (await local.primary.memGetInfo()).free;
      }
      const ms = Date.now() - t0;
      t.log(`killed with an endless kernel running: memory back in ${ms} ms (free ${before} -> ${held} -> ${free})`);
      t.true(free >= before - 64n * BigInt(MiB), 'the GiB and the context came back');
      t.true(ms < 10_000, `within seconds (${ms} ms)`);
      t.regex(String(await sync), /exited|worker/, 'the synchronize in flight failed');
    } finally {
      await iso.close();
    }
  });

  // Security review 2, H2: registered host memory is reachable by every kernel
  // of the process, so guest RAM registered whole in a worker let a guest
  // process's kernel read all of it. Unpinned (the backend's default), only
  // what a session mapped is registered; copies still come back right.
  test.serial('guest RAM not pinned: a kernel cannot reach it at its host address; copies and HOST_MAP still work', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-reach-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const fatbinFile = path.join(dir, 'kernels.fatbin');
    fs.writeFileSync(fatbinFile, image);
    const child = path.join(__dirname, 'reach-child.js');
    const runChild = (mode: string) =>
      JSON.parse(execFileSync(process.execPath, [child, mode, fatbinFile], { encoding: 'utf8', timeout: 60_000 })) as Record<
        string,
        unknown
      >;
    const pinned = runChild('pin');
    const unpinned = runChild('nopin');
    t.log(`pinned: ${JSON.stringify(pinned)}`);
    t.log(`not pinned: ${JSON.stringify(unpinned)}`);
    t.deepEqual(
      pinned.kernelRead,
      [0x1234, 0x5678, 0x9abc, 0xdef0],
      'pinned whole, guest RAM is there for any kernel of the process (why it is off by default)',
    );
    t.false(unpinned.registered, 'guest RAM itself is not registered');
    t.true(
      typeof unpinned.kernelRead === 'string' && /illegal|700/i.test(unpinned.kernelRead),
      `not pinned, a kernel reading guest RAM faults (${String(unpinned.kernelRead)})`,
    );
    for (const r of [pinned, unpinned]) {
      t.true(r.copyBack, `a 1 MiB copy from guest RAM and back is byte-exact (pin ${String(r.pin)})`);
      t.true(r.mappedCopyBack, `a copy from and to a HOST_MAP'd page is byte-exact (pin ${String(r.pin)})`);
      t.true(r.hostMapDevicePointer, `HOST_MAP gives a device pointer (pin ${String(r.pin)})`);
    }
  });

  test.serial(
    'mapped host memory: the device pointer is an alias of just those pages; neighbouring guest RAM and an unmapped alias fault',
    async (t) => {
      const image = kernelsFatbin(t);
      if (!image) return;
      const size = 8 * MiB;
      const fd = native.memfdCreate('qcuda-alias-test', size);
      const m = new native.Mapping(fd, size, 0);
      const view = new Uint8Array(m.window(0, size));
      const local = await createCudaProvider(0);
      const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
      const peekFrom = async (x: ProviderContext, src: bigint): Promise<number[] | string> => {
        const peek = await x.functionGet((await x.moduleLoad(image)).ref, 'peek', 256);
        const out = await x.malloc(64n);
        const p = new DataView(new ArrayBuffer(20));
        p.setBigUint64(0, src, true);
        p.setBigUint64(8, out, true);
        p.setInt32(16, 4, true);
        try {
          await x.launch(peek.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(p.buffer));
          await x.synchronize();
        } catch (e) {
          return (e as Error).message;
        }
        await x.copyFromDevice(
          [{ addr: m.address + 4096n * 100n, len: 16, view: view.subarray(4096 * 100, 4096 * 100 + 16) }],
          out,
          undefined,
        );
        return [...new Int32Array(view.buffer.slice(4096 * 100, 4096 * 100 + 16))];
      };
      try {
        await iso.registerGuestMemory(m.address, BigInt(size), {
          fd,
          region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n },
        });
        new Int32Array(view.buffer, 8192, 4).set([11, 22, 33, 44]);
        new Int32Array(view.buffer, 16384, 4).set([55, 66, 77, 88]); // another guest page, never mapped for the device
        const x = await iso.openContext(0);
        const hp = await x.hostDevicePointer([{ addr: m.address + 8192n, size: 4096n }]);
        t.deepEqual(await peekFrom(x, hp), [11, 22, 33, 44], 'a kernel reads mapped memory through its device pointer');
        const neighbour = await peekFrom(x, hp + 8192n);
        t.log(
          `a kernel reading 8 KiB past a mapped page's device pointer: ${typeof neighbour === 'string' ? neighbour : JSON.stringify(neighbour)}`,
        );
        t.true(
          typeof neighbour === 'string' && /illegal|700/i.test(neighbour),
          'the next guest page is not there: an illegal address, not guest RAM',
        );
        await x.destroy();
        const y = await iso.openContext(0);
        const hp2 = await y.hostDevicePointer([{ addr: m.address + 8192n, size: 4096n }]);
        await y.hostUnmap(hp2);
        const after = await peekFrom(y, hp2);
        t.true(typeof after === 'string' && /illegal|700/i.test(after), `after HOST_UNMAP the pointer reaches nothing (${String(after)})`);
        await y.destroy();
      } finally {
        await iso.close();
        m.unmap();
        native.close(fd);
      }
    },
  );

  test.serial(
    'module loads: what a load takes is measured; a 100-byte PTX with an 8 GiB .global is refused before it reaches the driver',
    async (t) => {
      const ptx = Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.global .b8 big[8589934592];\n');
      const { checkImage } = await import('../../backend/src/qcuda/modules/module-image');
      t.is(checkImage(new Uint8Array(ptx)).globalBytes, 8n << 30n, 'the estimate sees it');
      const x = await provider.openContext(0);
      try {
        const small = Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.global .b8 some[67108864];\n');
        const m = await x.moduleLoad(new Uint8Array(small));
        t.log(`a PTX declaring a 64 MiB .global: the load measured ${m.bytes} bytes`);
        t.true(m.bytes >= 64n * BigInt(MiB), `measured ${m.bytes}`);
        await x.moduleUnload(m.ref);
      } finally {
        await x.destroy();
      }
    },
  );

  test.serial('a whole page of PTX without a NUL (the driver read past it: SIGSEGV) is loaded from a padded copy', async (t) => {
    const x = await provider.openContext(0);
    try {
      const page = native.pageSize;
      const fd = native.memfdCreate('qcuda-ptx-page', page);
      const m = new native.Mapping(fd, page, 0);
      const v = new Uint8Array(m.window(0, page));
      v.fill(0x20);
      v.set(Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n'));
      v[page - 1] = 0x0a;
      const r = await x.moduleLoad(v.subarray(0, page)).then(
        async (mm) => {
          await x.moduleUnload(mm.ref);
          return 'loaded';
        },
        (err: CudaError) => `error ${err.code}`,
      );
      t.log(`a page of unterminated PTX ending at the mapping's end: ${r}; the process lives`);
      t.is(r, 'loaded');
      m.unmap();
      native.close(fd);
    } finally {
      await x.destroy();
    }
  });

  test.serial(
    'fuzzed fat binaries and PTX that pass the checks go to the driver in a worker: a driver crash ends only that worker',
    async (t) => {
      const image = kernelsFatbin(t);
      if (!image) return;
      const { checkImage } = await import('../../backend/src/qcuda/modules/module-image');
      const local = await createCudaProvider(0);
      const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
      try {
        let x = await iso.openContext(0);
        const rnd = prng(77);
        const ptxSeed = new Uint8Array(
          Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p) { ret; }\n.global .b32 g[64];\n'),
        );
        const counts = new Map<string, number>();
        for (let i = 0; i < 300; i++) {
          const img = (i % 2 ? image : ptxSeed).slice();
          for (let k = 1 + Math.floor(rnd() * 6); k > 0; k--) img[Math.floor(rnd() * img.length)] ^= 1 << Math.floor(rnd() * 8);
          let key: string;
          try {
            checkImage(img);
            key = await x.moduleLoad(img).then(
              async (mm) => {
                await x.moduleUnload(mm.ref);
                return 'loaded';
              },
              (err: CudaError) => (/exited/.test(err.message) ? 'worker crashed' : `driver error ${err.code}`),
            );
          } catch (err) {
            key = `refused by the checks (${(err as CudaError).code})`;
          }
          counts.set(key, (counts.get(key) ?? 0) + 1);
          if (key === 'worker crashed') {
            await x.destroy('exit');
            x = await iso.openContext(0);
          }
        }
        t.log(`300 mutated images: ${JSON.stringify(Object.fromEntries(counts))}`);
        const m = await x.moduleLoad(image);
        t.true(m.bytes >= 0n, 'the backend and a fresh worker still load a good module');
        await x.destroy();
      } finally {
        await iso.close();
      }
    },
  );
}
