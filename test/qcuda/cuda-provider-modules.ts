// The cuda provider on a GPU: modules and launches (parameter layouts,
// __device__ variables, stale handles) and device printf.
import test from 'ava';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { prng } from '../helpers';
import { ctx, kernelsFatbin, MiB, provider, ram, rejectsWith, seg, whileTicking } from './cuda-provider-fixtures';

/** Registered in order by cuda-provider.test.ts. */
export function moduleTests(): void {
  test.serial('modules: parameter layouts, vector add, by-value struct and small params, __device__ variables, ordering', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const m = (await ctx.moduleLoad(image)).ref;
    const vadd = await ctx.functionGet(m, 'vadd', 256);
    t.deepEqual(vadd.params, [
      { offset: 0, size: 8 },
      { offset: 8, size: 8 },
      { offset: 16, size: 8 },
      { offset: 24, size: 4 },
    ]);
    t.is(vadd.paramBytes, 28);
    const mixed = await ctx.functionGet(m, 'mixed', 256);
    t.deepEqual(mixed.params, [
      { offset: 0, size: 1 },
      { offset: 8, size: 32 },
      { offset: 40, size: 2 },
      { offset: 48, size: 8 },
      { offset: 56, size: 8 },
    ]);
    t.is(mixed.paramBytes, 64);
    await rejectsWith(t, () => ctx.functionGet(m, 'no_such_kernel', 256), CudaErr.SymbolNotFound);
    await rejectsWith(t, () => ctx.functionGet(m, 'mixed', 3), CudaErr.NotSupported, /more than 3 parameters/);

    // vector add on a stream, after an async memset of the output on the same stream, byte-exact
    const N = (1 << 20) + 3;
    const bytes = 4 * N;
    const [da, db, dout] = await Promise.all([0, 1, 2].map(() => ctx.malloc(BigInt(bytes))));
    const a = new Float32Array(ram.view.buffer, ram.view.byteOffset, N);
    const b = new Float32Array(ram.view.buffer, ram.view.byteOffset + bytes, N);
    const rnd = prng(7);
    for (let i = 0; i < N; i++) {
      a[i] = (rnd() - 0.5) * 1e6;
      b[i] = rnd() * 1e-3;
    }
    const s = await ctx.streamCreate(1, 0);
    await ctx.copyToDevice(da, [seg(ram, 0, bytes)], s);
    await ctx.copyToDevice(db, [seg(ram, bytes, bytes)], s);
    await ctx.memset(dout, 0xff, BigInt(bytes), s, true);
    const p = new DataView(new ArrayBuffer(28));
    p.setBigUint64(0, dout, true);
    p.setBigUint64(8, da, true);
    p.setBigUint64(16, db, true);
    p.setInt32(24, N, true);
    const params = new Uint8Array(p.buffer);
    const l = await whileTicking(() => ctx.launch(vadd.ref, [Math.ceil(N / 256), 1, 1], [256, 1, 1], 0, s, params));
    t.log(`launch enqueued in ${l.ms.toFixed(3)} ms`);
    const OUTB = 64 * MiB;
    ram.view.fill(0, OUTB, OUTB + bytes);
    await ctx.copyFromDevice([seg(ram, OUTB, bytes)], dout, s);
    const got = new Float32Array(ram.view.buffer, ram.view.byteOffset + OUTB, N);
    let bad = -1;
    for (let i = 0; i < N && bad < 0; i++) if (got[i] !== Math.fround(a[i] + b[i]) && !Number.isNaN(got[i])) bad = i;
    t.is(bad, -1, bad >= 0 ? `element ${bad}: ${got[bad]} != ${Math.fround(a[bad] + b[bad])}` : '');
    t.false(
      got.some((x) => Number.isNaN(x)),
      'every element written (the memset left NaNs)',
    );
    await rejectsWith(
      t,
      () => ctx.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, s, params.subarray(0, 24)),
      CudaErr.InvalidValue,
      /parameter bytes/,
    );

    // by-value struct, char, short, double: what the kernel saw, bit for bit
    const q = new DataView(new ArrayBuffer(64));
    q.setUint8(0, 0x7f);
    q.setUint8(8, 0xa5);
    q.setFloat64(16, Math.PI, true);
    q.setUint16(24, 0x1234, true);
    q.setUint16(26, 0xbeef, true);
    q.setUint16(28, 0x7fff, true);
    q.setInt32(32, -123456789, true);
    q.setUint16(40, 0xcafe, true);
    q.setFloat64(48, -1.5e300, true);
    const dres = await ctx.malloc(64n);
    q.setBigUint64(56, dres, true);
    await ctx.launch(mixed.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(q.buffer));
    await ctx.copyFromDevice([seg(ram, OUTB, 64)], dres, undefined);
    const r = new BigUint64Array(ram.view.buffer.slice(ram.view.byteOffset + OUTB, ram.view.byteOffset + OUTB + 64));
    const f64 = (x: number) => new BigUint64Array(new Float64Array([x]).buffer)[0];
    t.deepEqual([...r], [0x7fn, 0xa5n, f64(Math.PI), 0x7fff_beef_1234n, BigInt(-123456789 >>> 0), 0xcafen, f64(-1.5e300), 0x600dn]);

    // a __device__ variable: read, written by a kernel, written by a copy
    const v = await ctx.variableGet(m, 'counter');
    t.is(v.size, 16n);
    await rejectsWith(t, () => ctx.variableGet(m, 'nothing'), CudaErr.SymbolNotFound);
    const bump = await ctx.functionGet(m, 'bump', 256);
    t.is(bump.paramBytes, 4);
    const readCounter = async () => {
      await ctx.copyFromDevice([seg(ram, OUTB, 16)], v.dptr, undefined);
      return [...new Int32Array(ram.view.buffer.slice(ram.view.byteOffset + OUTB, ram.view.byteOffset + OUTB + 16))];
    };
    t.deepEqual(await readCounter(), [1, 2, 3, 4]);
    await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([10]).buffer));
    t.deepEqual(await readCounter(), [11, 12, 13, 14]);
    new Int32Array(ram.view.buffer, ram.view.byteOffset, 4).set([-1, -2, -3, -4]);
    await ctx.copyToDevice(v.dptr, [seg(ram, 0, 16)], undefined);
    await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([1]).buffer));
    t.deepEqual(await readCounter(), [0, -1, -2, -3]);

    // stale and foreign handles; a garbage image
    const other = await provider.openContext(0);
    await rejectsWith(t, () => other.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, undefined, params), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => other.functionGet(m, 'vadd', 256), CudaErr.InvalidResourceHandle);
    const e = await t.throwsAsync(other.moduleLoad(new Uint8Array(4096).fill(0x42)), { instanceOf: CudaError });
    t.log(`garbage image: ${e!.code} ${e!.message}`);
    await other.destroy();
    await ctx.moduleUnload(m);
    await rejectsWith(t, () => ctx.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, undefined, params), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => ctx.moduleUnload(m), CudaErr.InvalidResourceHandle);
    await ctx.synchronize();
    await ctx.streamDestroy(s);
    await Promise.all([da, db, dout, dres].map((x) => ctx.free(x)));
  });

  test.serial("device printf reaches the output sink of the context that printed, by its synchronize; not another context's", async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const got = { a: [] as string[], b: [] as string[] };
    const sink = (who: 'a' | 'b') => (kind: number, bytes: Uint8Array) => got[who].push(`${kind}:${Buffer.from(bytes).toString('latin1')}`);
    const a = await provider.openContext(0, sink('a'));
    const b = await provider.openContext(0, sink('b'));
    const sayA = await a.functionGet((await a.moduleLoad(image)).ref, 'say', 256);
    await b.functionGet((await b.moduleLoad(image)).ref, 'say', 256); // b never launches
    const expect = (x: number, n: number) =>
      Array.from({ length: n }, (_, i) => `say ${x} line ${String(i).padStart(5, '0')}: 0123456789abcdefghijklmnopqrstuvwxyz\n`).join('');
    const text = (l: string[]) => l.map((p) => p.slice(2)).join('');
    for (const [x, n] of [
      [42, 3],
      [7, 3000],
    ]) {
      // 3000 lines: about 160 KiB through the capture's pipe
      got.a.length = 0;
      await a.launch(sayA.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(new Int32Array([x, n]).buffer));
      await b.synchronize(); // a flush point of a context that never launched: whatever it brings is a's
      await a.synchronize();
      t.true(
        got.a.every((p) => p.startsWith('1:')),
        'printf output is stdout output',
      );
      t.is(text(got.a), expect(x, n), `${n} lines, whole and in order, by the end of a's synchronize`);
    }
    t.deepEqual(got.b, [], 'nothing went to the other context');
    await a.destroy();
    await b.destroy();
  });
}
