// The other process of ledger.test.ts: opens the ledger on fd 3 and, as its
// argument says, hammers one budget with takes and gives ("hammer SLOT N"),
// takes and holds then waits to be killed ("hold SLOT N"), dies holding
// the ledger's lock ("die-locked"), takes the lock and keeps it while it
// lives ("hold-lock"), takes one count as the backend would ("take SLOT N":
// prints what happened and how long it took), or plays a hostile worker
// that writes the ledger's file directly ("zero": all of it; "forge-*":
// counts found by their values, see forge()).
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
}
