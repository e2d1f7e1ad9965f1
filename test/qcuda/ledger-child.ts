// The other process of ledger.test.ts: opens the ledger on fd 3 and, as its
// argument says, hammers one budget with takes and gives ("hammer SLOT N"),
// takes and holds then waits to be killed ("hold SLOT N"), or dies holding
// the ledger's lock ("die-locked").
import { native } from '../../backend/src/sys/native';

const [what, slotArg, nArg] = process.argv.slice(2);
const ledger = new native.Ledger(3);
const slot = Number(slotArg);
const n = BigInt(nArg ?? '0');

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
}
