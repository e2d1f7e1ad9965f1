// Copies and given ranges (addon/src/given.h), on the fake driver (copies are
// memcpy): guest RAM a session mapped for the GPU is copied through its
// registered alias, the rest of guest RAM from where it lies. The alias here
// holds other bytes than the "guest RAM" it stands for, so which one a copy
// read shows in the bytes that come back.
import test from 'ava';
import { native } from '../../backend/src/sys/native';
import { fakeCuda } from './fake-driver';

const n = fakeCuda();

function buffer(t: { teardown(f: () => void): void }, len: number, fill: (i: number) => number): { addr: bigint; bytes: Uint8Array } {
  const fd = native.memfdCreate('qcuda-given', len);
  const m = new native.Mapping(fd, len, 0);
  native.close(fd);
  t.teardown(() => m.unmap());
  const bytes = new Uint8Array(m.window(0, len));
  bytes.forEach((_, i) => (bytes[i] = fill(i)));
  return { addr: m.address, bytes };
}

test.serial('parts of a segment in given ranges move to their aliases; scattered pieces in alias order join into one', (t) => {
  const A = 0x10_0000_0000n;
  const X = 0x20_0000_0000n;
  // Guest pages 2 and 0 (in that order) are one alias at X: page 2 at X, page 0 at X + 4096.
  n.giveHost(A + 8192n, 4096n, X);
  n.giveHost(A, 4096n, X + 4096n);
  t.teardown(() => {
    n.ungiveHost(A + 8192n, X);
    n.ungiveHost(A, X + 4096n);
  });
  t.deepEqual(n.resolveSegments([{ addr: A + 100n, len: 4096 + 8192 }]), [
    { addr: X + 4096n + 100n, len: 3996 }, // the rest of page 0, in the alias
    { addr: A + 4096n, len: 4096 }, // page 1: not given, guest RAM as it is
    { addr: X, len: 4096 }, // page 2
    { addr: A + 12288n, len: 100 }, // past the given pages
  ]);
  // Page 2 then page 0, as the alias lays them out: one range of it.
  t.deepEqual(
    n.resolveSegments([
      { addr: A + 8192n, len: 4096 },
      { addr: A, len: 4096 },
    ]),
    [{ addr: X, len: 8192 }],
  );
  t.deepEqual(
    n.resolveSegments([{ addr: A + 4096n, len: 10 }]),
    [{ addr: A + 4096n, len: 10 }],
    'a segment outside every range is untouched',
  );
});

test.serial('ungiveHost forgets a range only for the alias that gave it', (t) => {
  const A = 0x30_0000_0000n;
  n.giveHost(A, 4096n, 0x40_0000_0000n);
  n.ungiveHost(A, 0x50_0000_0000n); // another alias's: not this one
  t.deepEqual(n.resolveSegments([{ addr: A, len: 16 }]), [{ addr: 0x40_0000_0000n, len: 16 }]);
  n.ungiveHost(A, 0x40_0000_0000n);
  t.deepEqual(n.resolveSegments([{ addr: A, len: 16 }]), [{ addr: A, len: 16 }]);
});

test.serial('copies to and from the device read and write the alias of given guest RAM, and guest RAM elsewhere', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const ram = buffer(t, 16384, (i) => i & 0xff);
  const alias = buffer(t, 4096, () => 0xee);
  n.giveHost(ram.addr + 4096n, 4096n, alias.addr);
  t.teardown(() => n.ungiveHost(ram.addr + 4096n, alias.addr));
  const dev = await ctx.malloc(12288n);
  await ctx.copyHtoD(dev, [{ addr: ram.addr, len: 12288 }], 0);
  const back = buffer(t, 12288, () => 0);
  await ctx.copyDtoH([{ addr: back.addr, len: 12288 }], dev, 0);
  t.deepEqual([...back.bytes.subarray(0, 4096)], [...ram.bytes.subarray(0, 4096)], 'page 0 from guest RAM');
  t.true(
    back.bytes.subarray(4096, 8192).every((b) => b === 0xee),
    'page 1 from its alias',
  );
  t.deepEqual([...back.bytes.subarray(8192)], [...ram.bytes.subarray(8192, 12288)], 'page 2 from guest RAM');
  // And back: device bytes copied into given guest RAM land in its alias.
  alias.bytes.fill(0);
  const before = [...ram.bytes.subarray(4096, 8192)];
  await ctx.copyDtoH([{ addr: ram.addr + 4096n, len: 4096 }], dev, 0);
  t.deepEqual([...alias.bytes], [...ram.bytes.subarray(0, 4096)], "the device's first page went to the alias");
  t.deepEqual([...ram.bytes.subarray(4096, 8192)], before, 'not to guest RAM itself (the alias stands for it)');
});
