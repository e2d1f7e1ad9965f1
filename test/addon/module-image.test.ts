// The cuda addon's moduleLoad (addon/src/cuda_image.h, security review
// findings 6 and 7) on the fake driver, which reads every image as a C string
// (as NVIDIA's reads PTX) and lets an image claim "device memory":
//  - the driver gets a copy of the image with zero padding after it, so an
//    image without a NUL is read up to its end and no further, wherever it
//    lies (at the end of a page, or followed by other bytes);
//  - structured images are checked against their length first: an ELF image
//    must be ELF64 with its header, tables, segments and sections inside it;
//    a fat binary's header and every entry must lie inside it (an
//    uncompressed ELF entry is checked as an ELF image); anything else must
//    be text; the rest fails with cudaErrorInvalidKernelImage (200) before
//    the driver sees it, and random mutations never crash the process;
//  - what the load took is measured (free memory before and after) and
//    returned with the module id; with a limit, a load taking more is undone.
import test from 'ava';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../../backend/src/sys/native';
import type { CudaContextNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { prng } from '../helpers';
import { fakeCuda, text } from './fake-driver';

const n = fakeCuda();
const MiB = 1n << 20n;

// ---- hand-made images

/** An ELF64 cubin-like image: header, one program header, a name table, two section headers. */
function elf(): Uint8Array {
  const b = new Uint8Array(264);
  const v = new DataView(b.buffer);
  b.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]);
  v.setUint16(0x10, 2, true); // ET_EXEC
  v.setUint16(0x12, 190, true); // EM_CUDA
  v.setUint32(0x14, 1, true);
  v.setBigUint64(0x20, 64n, true); // e_phoff
  v.setBigUint64(0x28, 136n, true); // e_shoff
  v.setUint16(0x34, 64, true); // e_ehsize
  v.setUint16(0x36, 56, true); // e_phentsize
  v.setUint16(0x38, 1, true); // e_phnum
  v.setUint16(0x3a, 64, true); // e_shentsize
  v.setUint16(0x3c, 2, true); // e_shnum
  v.setUint16(0x3e, 1, true); // e_shstrndx
  v.setUint32(64, 1, true); // PT_LOAD
  v.setBigUint64(64 + 8, 120n, true);
  v.setBigUint64(64 + 32, 11n, true);
  b.set(Buffer.from('\0.shstrtab\0', 'latin1'), 120);
  const s1 = 136 + 64;
  v.setUint32(s1, 1, true);
  v.setUint32(s1 + 4, 3, true); // SHT_STRTAB
  v.setBigUint64(s1 + 24, 120n, true);
  v.setBigUint64(s1 + 32, 11n, true);
  return b;
}

interface Entry {
  kind: number;
  payload: Uint8Array;
  flags?: bigint;
}

/** A fat binary: 16-byte header, then per entry a 64-byte header and the payload padded to 8. */
function fatbin(entries: Entry[]): Uint8Array {
  const size = entries.reduce((s, e) => s + 64 + pad8(e.payload.length), 0);
  const b = new Uint8Array(16 + size);
  const v = new DataView(b.buffer);
  v.setUint32(0, 0xba55ed50, true);
  v.setUint16(4, 1, true);
  v.setUint16(6, 16, true);
  v.setBigUint64(8, BigInt(size), true);
  let at = 16;
  for (const e of entries) {
    v.setUint16(at, e.kind, true);
    v.setUint16(at + 2, 0x0101, true);
    v.setUint32(at + 4, 64, true);
    v.setUint32(at + 8, pad8(e.payload.length), true);
    v.setUint32(at + 16, e.payload.length, true);
    v.setUint32(at + 28, 80, true); // sm_80
    v.setBigUint64(at + 40, e.flags ?? 0n, true);
    b.set(e.payload, at + 64);
    at += 64 + pad8(e.payload.length);
  }
  return b;
}

const pad8 = (x: number) => (x + 7) & ~7;
const PTX = '.version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { ret; }\n';
const goodFatbin = () =>
  fatbin([
    { kind: 2, payload: elf() },
    { kind: 1, payload: text(`${PTX}\0`) },
  ]);

/** A copy of b with f applied to its DataView. */
function edit(b: Uint8Array, f: (v: DataView, b: Uint8Array) => void): Uint8Array {
  const c = b.slice();
  f(new DataView(c.buffer), c);
  return c;
}

async function withContext(f: (ctx: CudaContextNative) => Promise<void>): Promise<void> {
  const ctx = await n.openContext(0, 0, false);
  try {
    await f(ctx);
  } finally {
    await ctx.destroy();
  }
}

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 0,
    (e: { code: number }) => e.code,
  );

test('well-formed images pass: ELF64, fat binaries with ELF and PTX entries, PTX text', (t) => {
  t.is(n.MODULE_IMAGE_PADDING, 16);
  const ok: [string, Uint8Array][] = [
    ['elf', elf()],
    ['fatbin', goodFatbin()],
    ['fatbin, compressed entry (not looked into)', fatbin([{ kind: 2, payload: new Uint8Array(40).fill(0xee), flags: 0x2000n }])],
    [
      'fatbin, compressed ELF-looking entry',
      fatbin([{ kind: 2, payload: edit(elf(), (v) => v.setBigUint64(0x28, 1n << 40n, true)), flags: 0x8000n }]),
    ],
    ['fatbin followed by other bytes', new Uint8Array([...goodFatbin(), 1, 2, 3])],
    [
      'ELF with a NOBITS section of any size',
      edit(elf(), (v) => {
        v.setUint32(200 + 4, 8, true);
        v.setBigUint64(200 + 32, 1n << 60n, true);
        v.setUint32(200, 0, true);
      }),
    ],
    [
      'ELF without sections',
      edit(elf(), (v) => {
        v.setUint16(0x3c, 0, true);
        v.setBigUint64(0x28, 0n, true);
      }),
    ],
    ["ELF, a section name at the name table's last byte", edit(elf(), (v) => v.setUint32(200, 10, true))],
    ['PTX', text(PTX)],
    ['PTX with its NUL and bytes after it', text(`${PTX}\0\x01\x02\xff`)],
    ['a comment', text('// a PTX comment')],
    ['leading whitespace', text(' \t\r\n\v\f.version 8.0')],
    ['UTF-8 after the first byte', new Uint8Array(Buffer.from('// café\n.version 8.0\n', 'utf8'))],
  ];
  for (const [what, img] of ok) t.is(n.checkModuleImage(img), '', what);
});

test('images whose structure runs past their length, and binary junk, are refused', (t) => {
  const E = elf();
  const F = goodFatbin();
  const bad: [string, Uint8Array][] = [
    ['ELF, truncated header', E.subarray(0, 63)],
    ['ELF, section headers cut off', E.subarray(0, 200)],
    [
      'ELF32',
      edit(E, (_, b) => {
        b[4] = 1;
      }),
    ],
    [
      'big-endian ELF',
      edit(E, (_, b) => {
        b[5] = 2;
      }),
    ],
    ['ELF, section header table past the end', edit(E, (v) => v.setBigUint64(0x28, 137n, true))],
    ['ELF, section header table at 2^64 - 64', edit(E, (v) => v.setBigUint64(0x28, (1n << 64n) - 64n, true))],
    ['ELF, one section too many', edit(E, (v) => v.setUint16(0x3c, 3, true))],
    ['ELF, section headers too small', edit(E, (v) => v.setUint16(0x3a, 40, true))],
    ['ELF, section name table out of range', edit(E, (v) => v.setUint16(0x3e, 2, true))],
    ['ELF, extended section numbering', edit(E, (v) => v.setUint16(0x3c, 0, true))],
    ['ELF, section bytes past the end', edit(E, (v) => v.setBigUint64(200 + 32, 200n, true))],
    [
      'ELF, section offset wrapping around',
      edit(E, (v) => {
        v.setBigUint64(200 + 24, (1n << 64n) - 8n, true);
        v.setBigUint64(200 + 32, 16n, true);
      }),
    ],
    ['ELF, program headers past the end', edit(E, (v) => v.setBigUint64(0x20, 240n, true))],
    ['ELF, program headers too small', edit(E, (v) => v.setUint16(0x36, 32, true))],
    ['ELF, extended program header numbering', edit(E, (v) => v.setUint16(0x38, 0xffff, true))],
    ['ELF, segment bytes past the end', edit(E, (v) => v.setBigUint64(64 + 32, 1000n, true))],
    ['ELF, header size past the end', edit(E, (v) => v.setUint16(0x34, 1000, true))],
    ['ELF, a section name past the name table', edit(E, (v) => v.setUint32(200, 11, true))],
    ['ELF, a section name in a name table without bytes', edit(E, (v) => v.setUint32(200 + 4, 8, true))],
    ['fatbin, truncated header', F.subarray(0, 15)],
    ['fatbin, one byte short', F.subarray(0, F.length - 1)],
    ['fatbin, size one past the end', edit(F, (v) => v.setBigUint64(8, v.getBigUint64(8, true) + 1n, true))],
    ['fatbin, size 2^64 - 1', edit(F, (v) => v.setBigUint64(8, (1n << 64n) - 1n, true))],
    ['fatbin, header size 8', edit(F, (v) => v.setUint16(6, 8, true))],
    ['fatbin, header size past the end', edit(F, (v) => v.setUint16(6, 0xffff, true))],
    ['fatbin without entries', edit(F.subarray(0, 16), (v) => v.setBigUint64(8, 0n, true))],
    ['fatbin, entry header of 32 bytes', edit(F, (v) => v.setUint32(16 + 4, 32, true))],
    ['fatbin, entry header past the end', edit(F, (v) => v.setUint32(16 + 4, 0xffffffff, true))],
    ['fatbin, entry payload past the end', edit(F, (v) => v.setUint32(16 + 8, F.length, true))],
    ['fatbin, entry payload size in the high word', edit(F, (v) => v.setUint32(16 + 12, 1, true))],
    [
      'fatbin, a partial entry at the end',
      edit(new Uint8Array([...fatbin([{ kind: 1, payload: text(PTX) }]), ...new Uint8Array(40)]), (v) =>
        v.setBigUint64(8, v.getBigUint64(8, true) + 40n, true),
      ),
    ],
    ['fatbin, a bad ELF entry', fatbin([{ kind: 2, payload: edit(E, (v) => v.setBigUint64(0x28, 1n << 40n, true)) }])],
    ['a fat binary wrapper (it holds a pointer)', new Uint8Array([0xb1, 0x43, 0x62, 0x46, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0])],
    ['old-style fat binary magic', new Uint8Array([0x01, 0x5a, 0xe5, 0x1e, 0, 0, 0, 0])],
    ['a high first byte', text('\x80// text')],
    ['a control character', text('// text\x07 more')],
    ['DEL', text('// text\x7f')],
    ['"\\x7fEL"', text('\x7fEL')],
    ['a NUL first', text('\0// text')],
  ];
  for (const [what, img] of bad) {
    const why = n.checkModuleImage(img);
    t.not(why, '', what);
  }
  t.regex(n.checkModuleImage(edit(E, (v) => v.setBigUint64(0x28, 137n, true))), /ELF section headers \(2 x 64 at 137\) outside the image/);
  t.regex(n.checkModuleImage(bad.find(([w]) => w.includes('partial entry'))![1]), /fat binary entry 1 truncated/);
});

test.serial(
  'refused images never reach the driver: moduleLoad rejects with cudaErrorInvalidKernelImage; an empty one with cudaErrorInvalidValue',
  async (t) => {
    await withContext(async (ctx) => {
      const e = await ctx.moduleLoad(edit(elf(), (v) => v.setBigUint64(0x28, 1n << 40n, true))).then(
        () => undefined,
        (err: Error & { code: number; call: string }) => err,
      );
      t.is(e?.code, 200);
      t.regex(e?.message ?? '', /^qcuda: module image: ELF section headers/);
      t.is(await codeOf(ctx.moduleLoad(text('\x01\x02\x03\x04'))), 200);
      t.is(await codeOf(ctx.moduleLoad(new Uint8Array(0))), 1);
      for (const img of [elf(), goodFatbin(), text(PTX)]) {
        const m = await ctx.moduleLoad(img);
        t.is(typeof m.id, 'number');
        await ctx.moduleUnload(m.id);
      }
    });
  },
);

test.serial(
  'the driver reads an image without a NUL up to its end and no further: at the end of a page, or followed by other bytes',
  async (t) => {
    await withContext(async (ctx) => {
      const page = native.pageSize;
      const fd = native.memfdCreate('qcuda-ptx-page', page);
      const m = new native.Mapping(fd, page, 0);
      try {
        const v = new Uint8Array(m.window(0, page));
        v.fill(0x20);
        v.set(Buffer.from('.version 8.0\n.target sm_80\n'));
        v[page - 1] = 0x0a;
        const mod = await ctx.moduleLoad(v);
        t.is((await ctx.variableGet(mod.id, '__image_strlen')).size, BigInt(page), 'a whole page, no NUL: read to its end');
      } finally {
        m.unmap();
        native.close(fd);
      }
      const buf = text('// some PTX, then bytes that are not part of it');
      const mod = await ctx.moduleLoad(buf.subarray(0, 12));
      t.is((await ctx.variableGet(mod.id, '__image_strlen')).size, 12n, "what follows the image in the caller's memory is not read");
    });
  },
);

test.serial('moduleLoad measures the device memory the load took; with a limit, a load that took more is undone', async (t) => {
  await withContext(async (ctx) => {
    const before = (await ctx.memGetInfo()).free;
    const plain = await ctx.moduleLoad(text(PTX));
    t.is(plain.bytes, 0n);
    const big = await ctx.moduleLoad(text(`${PTX}// fakecuda:global=${64n * MiB}\n`));
    t.is(big.bytes, 64n * MiB, "the module's 64 MiB of globals");
    t.is((await ctx.memGetInfo()).free, before - 64n * MiB);
    const fits = await ctx.moduleLoad(text(`// fakecuda:global=${MiB}`), MiB);
    t.is(fits.bytes, MiB, 'a limit it does not exceed');
    const e = await ctx.moduleLoad(text(`// fakecuda:global=${8n * MiB}`), 4n * MiB).then(
      () => undefined,
      (err: Error & { code: number }) => err,
    );
    t.is(e?.code, 2, 'cudaErrorMemoryAllocation');
    t.regex(e?.message ?? '', /took 8388608 bytes of device memory, more than the 4194304 allowed/);
    t.is((await ctx.memGetInfo()).free, before - 65n * MiB, 'the refused load was undone');
    await ctx.moduleUnload(big.id);
    await ctx.moduleUnload(fits.id);
    await ctx.moduleUnload(plain.id);
    t.is((await ctx.memGetInfo()).free, before);
    t.is(await codeOf(ctx.moduleLoad(text('// fakecuda:global=1099511627776'))), 2, "the driver's own out of memory");
    t.throws(() => ctx.moduleLoad(text(PTX), -1n), { instanceOf: RangeError });
  });
});

test.serial(
  'random mutations of ELF, fat binary and PTX images: the checks answer each, and what passes loads without a crash',
  async (t) => {
    const rnd = prng(11);
    const seeds = [elf(), goodFatbin(), text(PTX), fatbin([{ kind: 2, payload: elf() }])];
    const counts = new Map<string, number>();
    await withContext(async (ctx) => {
      for (let i = 0; i < 3000; i++) {
        const img = seeds[i % seeds.length].slice();
        for (let k = 1 + Math.floor(rnd() * 4); k > 0; k--) {
          const at = Math.floor(rnd() * img.length);
          img[at] = rnd() < 0.5 ? img[at] ^ (1 << Math.floor(rnd() * 8)) : Math.floor(rnd() * 256);
        }
        const cut = rnd() < 0.2 ? img.subarray(0, Math.floor(rnd() * img.length)) : img;
        const why = n.checkModuleImage(cut);
        const key = `${i % seeds.length}:${why === '' ? 'passed' : 'refused'}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (i % 3 === 0) {
          const r = await ctx.moduleLoad(cut).then(
            (m) => ctx.moduleUnload(m.id).then(() => 0),
            (e: { code: number }) => e.code,
          );
          t.true(why === '' ? r === 0 : r === 200 || r === 1, `image ${i}: ${why} -> ${r}`);
        }
      }
    });
    t.log(JSON.stringify(Object.fromEntries([...counts].sort())));
    t.pass();
  },
);

// Where nvcc is installed: what it makes passes (a fat binary with SASS and PTX, compressed or not, a cubin, PTX).
let nvcc: string | undefined;
for (const p of [process.env.NVCC, '/usr/local/cuda/bin/nvcc', 'nvcc']) {
  if (!p) continue;
  try {
    execFileSync(p, ['--version'], { stdio: 'ignore' });
    nvcc = p;
    break;
  } catch {
    // not there
  }
}

(nvcc ? test : test.skip)('what nvcc makes passes the checks and loads', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-nvcc-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const cu = path.join(dir, 'k.cu');
  fs.writeFileSync(
    cu,
    '__device__ int table[1 << 20];\n__constant__ float c[16];\nextern "C" __global__ void k(int *p, int n) { if (n < 1024) p[n] = table[n] + (int)c[n & 15]; }\n',
  );
  const out = (name: string, args: string[]) => {
    const o = path.join(dir, name);
    execFileSync(nvcc!, [...args, '-o', o, cu], { stdio: 'pipe' });
    return new Uint8Array(fs.readFileSync(o));
  };
  const images: [string, Uint8Array][] = [
    [
      'fatbin',
      out('k.fatbin', ['-fatbin', '-gencode', 'arch=compute_80,code=sm_80', '-gencode', 'arch=compute_90,code=[sm_90,compute_90]']),
    ],
    ['fatbin, compressed', out('kc.fatbin', ['-fatbin', '-Xfatbin=-compress-all', '-gencode', 'arch=compute_80,code=[sm_80,compute_80]'])],
    ['cubin', out('k.cubin', ['-cubin', '-arch=sm_90'])],
    ['ptx', out('k.ptx', ['-ptx', '-arch=sm_90'])],
  ];
  t.log(images.map(([what, img]) => `${what}: ${img.length} bytes`).join(', '));
  await withContext(async (ctx) => {
    for (const [what, img] of images) {
      t.is(n.checkModuleImage(img), '', what);
      await ctx.moduleUnload((await ctx.moduleLoad(img)).id);
      // Every prefix that leaves the end out is refused, for the structured ones.
      if (what !== 'ptx')
        for (const cut of [img.length - 1, img.length >> 1, 64, 16])
          t.not(n.checkModuleImage(img.subarray(0, cut)), '', `${what} cut at ${cut}`);
    }
  });
  // A symbol whose name lies past its string table.
  const cubin = images.find(([w]) => w === 'cubin')![1];
  const v = new DataView(cubin.buffer, cubin.byteOffset, cubin.byteLength);
  const shoff = Number(v.getBigUint64(0x28, true));
  const symtab = Array.from({ length: v.getUint16(0x3c, true) }, (_, i) => shoff + i * 64).find((o) => v.getUint32(o + 4, true) === 2);
  t.truthy(symtab, 'the cubin has a symbol table');
  const bad = edit(cubin, (w) => w.setUint32(Number(v.getBigUint64(symtab! + 24, true)) + 24, 0xfffffff0, true));
  t.regex(n.checkModuleImage(bad), /ELF symbol 1 of section \d+: name outside its string table/);
});
