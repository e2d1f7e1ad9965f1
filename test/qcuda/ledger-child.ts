// The other process of ledger.test.ts: opens the ledger on fd 3 and, as its
// argument says, hammers one budget with takes and gives ("hammer SLOT N"),
// takes and holds then waits to be killed ("hold SLOT N"), dies holding
// the ledger's lock ("die-locked"), takes the lock and keeps it while it
// lives ("hold-lock"), takes one count as the backend would ("take SLOT N":
// prints what happened and how long it took), or plays a hostile worker
// that writes the ledger's file directly ("zero": all of it; "forge-*":
// counts found by their values, see forge()), or, for security review 3's
// N7, takes and gives for a while as the backend does, counting what the
// ledger answered ("busy SLOT N MS"), while another process writes the lock
// word and every other byte of the file ("scribble MS").
import fs from 'node:fs';
import { native } from '../../backend/src/sys/native';

const [what, slotArg, nArg] = process.argv.slice(2);
// The limits the ledger was made with, as the backend hands them to a worker.
const limits = (process.env.LEDGER_LIMITS ?? '').split(',').map(BigInt);
const ledger = new native.Ledger(3, limits);
const slot = Number(slotArg);
const n = BigInt(nArg ?? '0');
const I64_MAX = (1n << 63n) - 1n;

/** Offsets in the ledger's file of the 8-byte little-endian value v. */
function offsetsOf(v: bigint): number[] {
  const file = fs.readFileSync('/proc/self/fd/3');
  const want = Buffer.alloc(8);
  want.writeBigInt64LE(v);
  const at: number[] = [];
  for (let i = file.indexOf(want); i >= 0; i = file.indexOf(want, i + 1)) at.push(i);
  return at;
}

function write(offset: number, v: bigint): void {
  const b = Buffer.alloc(8);
  b.writeBigInt64LE(v);
  fs.writeSync(3, b, 0, 8, offset);
}

/**
 * Takes a count no other place in the file has (on unbounded budget 1) and
 * finds it twice: the budget's total, then the slot's held value. Returns
 * their offsets, the count given back.
 */
function find(s: number, mark: bigint): { total: number; held: number } {
  if (!ledger.take(1, s, mark)) throw new Error('take refused');
  const at = offsetsOf(mark);
  if (!ledger.give(1, s, mark)) throw new Error('give refused');
  if (at.length !== 2) throw new Error(`found ${at.length} copies of the mark`);
  return { total: at[0], held: at[1] };
}

if (what === 'hammer') {
  let held = 0n;
  let refused = 0;
  for (let i = 0; i < 20000; i++) {
    if (i % 3 !== 2) {
      if (ledger.take(0, slot, n)) held += n;
      else refused++;
    } else if (held > 0n) {
      if (!ledger.give(0, slot, n)) throw new Error('give refused');
      held -= n;
    }
    if (ledger.total(0) > ledger.limit(0)) throw new Error(`total ${ledger.total(0)} over the limit`);
  }
  process.stdout.write(JSON.stringify({ held: held.toString(), refused }));
} else if (what === 'hold') {
  if (!ledger.take(0, slot, n)) throw new Error('take refused');
  process.stdout.write('holding\n');
  setInterval(() => undefined, 1000);
} else if (what === 'die-locked') {
  ledger.take(0, slot, n);
  ledger.lockForTest();
  process.exit(0);
} else if (what === 'hold-lock') {
  ledger.lockForTest();
  process.stdout.write('holding\n');
  setInterval(() => undefined, 1000);
} else if (what === 'take') {
  const t0 = Date.now();
  let result: string;
  try {
    result = String(ledger.take(0, slot, n));
  } catch (e) {
    result = `threw: ${(e as Error).message}`;
  }
  process.stdout.write(JSON.stringify({ result, ms: Date.now() - t0 }));
} else if (what === 'zero') {
  // First cut the file short under the backend's mapping (sealed: refused), then every byte of it: totals, slots (and the lock, not held now).
  let shrink = 'done';
  try {
    fs.ftruncateSync(3, 0);
  } catch (e) {
    shrink = (e as NodeJS.ErrnoException).code ?? 'failed';
  }
  const size = fs.fstatSync(3).size;
  fs.writeSync(3, Buffer.alloc(size), 0, size, 0);
  process.stdout.write(JSON.stringify({ shrink }));
} else if (what === 'forge-wrap') {
  // Two slots that say they hold the most a count can be, then death inside the lock: the next locker rebuilds the totals from them.
  const a = find(slot, 0x0123456789abcdefn);
  const b = find(slot + 1, 0x0fedcba987654321n);
  write(a.held, I64_MAX);
  write(b.held, I64_MAX);
  ledger.lockForTest();
  process.exit(0);
} else if (what === 'forge-held') {
  // A slot that says it holds more than the budget's total: reclaiming it must not take the total below 0.
  const a = find(slot, 0x0123456789abcdefn);
  write(a.total, 5n);
  write(a.held, 1000n);
} else if (what === 'busy') {
  // The backend's side: takes and gives for MS ms. A take or give either answers or says the ledger stayed locked; nothing else.
  const ms = Number(process.argv[5]);
  const t0 = Date.now();
  const r = { pairs: 0, refused: 0, timeouts: 0, badTotals: 0 };
  const limit = ledger.limit(0);
  const counted = (f: () => boolean): boolean | undefined => {
    try {
      return f();
    } catch (e) {
      if ((e as { code?: string }).code !== 'ETIMEDOUT') throw e;
      r.timeouts++;
      return undefined;
    }
  };
  while (Date.now() - t0 < ms) {
    const took = counted(() => ledger.take(0, slot, n));
    if (took === false) r.refused++;
    if (took === true) {
      counted(() => ledger.give(0, slot, n));
      r.pairs++;
    }
    // What this process reads back is whatever the file says now; a total it takes from is checked in the take.
    const total = counted(() => ledger.total(0) >= 0n);
    if (total === false) r.badTotals++;
  }
  process.stdout.write(JSON.stringify({ ...r, limit: limit.toString() }));
} else if (what === 'scribble') {
  // A hostile worker with the ledger's fd. Mapped as the backend maps it, it writes, until MS ms have passed:
  // - (from the start) the robust-list pointers of the pthread mutex the file used to begin with (offsets 24 and 32), each time
  //   that mutex's owner word (offset 8) is set: the unlock of such a mutex writes through them (security review 3, N7);
  // - (after the first third) the lock word (offset 4): 0, its own tid (alive), the locker's pid (its own tid: "held by me"), any value;
  // - every other word, at random, with random values (the header, the totals, the slots).
  const ms = Number(slotArg);
  const other = Number(nArg);
  const size = fs.fstatSync(3).size;
  const map = new native.Mapping(3, size, 0);
  const ab = map.window(0, size);
  const i32 = new Int32Array(ab);
  const i64 = new BigInt64Array(ab);
  const bad = 0x4141414141414140n;
  const lockWords = [0, process.pid, other, 1, 0x7fffffff, -1];
  const t0 = Date.now();
  let writes = 0;
  let all = false;
  for (let i = 0; ; i++) {
    if (Atomics.load(i32, 2) !== 0) {
      Atomics.store(i64, 3, bad);
      Atomics.store(i64, 4, bad);
    }
    if (all && i % 16 === 0) Atomics.store(i32, 1, lockWords[(i >> 4) % lockWords.length] | 0);
    if (all && i % 8 === 0) {
      const w = Math.floor(Math.random() * i32.length);
      Atomics.store(i32, w, (Math.random() * 2 ** 32) | 0);
      writes++;
    }
    if (i % 4096 === 0) {
      const now = Date.now() - t0;
      if (now > ms) break;
      all = now > ms / 3;
    }
  }
  process.stdout.write(JSON.stringify({ writes }));
}
