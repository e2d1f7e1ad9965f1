// The GPU share policy in C (addon/src/share_table.cc, what the ring server
// admits posts by) against the one in TypeScript (qcuda/share/policy.ts, the
// JavaScript gate's): the same answers on the same tables, many of them
// drawn at random, edge cases included (ties at the slack, VMs that want
// nothing, weights of 1 and 1000, busy processes whose pending time counts).
import test from 'ava';
import { native } from '../../backend/src/sys/native';
import { DEFAULT_POLICY, catchUp, mayPost, type Policy, type VmView } from '../../backend/src/qcuda/share/policy';

const MS = 1e6;

/** A small deterministic generator (mulberry32), so that a failure can be rerun. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function tableAt(r: () => number, now: number): VmView[] {
  const pick = (n: number): number => Math.floor(r() * n);
  return Array.from({ length: 1 + pick(5) }, (_, i) => ({
    slot: i * 3 + pick(3),
    weight: [1, 1, 2, 3, 7, 1000][pick(6)],
    // Usages on a grid of the slack, so that ties at the slack come up.
    usage: pick(3) === 0 ? 0 : pick(40) * DEFAULT_POLICY.slackNs,
    busySince: Array.from({ length: pick(3) }, () => now - pick(50) * MS),
    waiting: pick(3) === 0 ? 1 : 0,
    lastSync: pick(2) === 0 ? 0 : now - pick(3) * MS,
  }));
}

test('the C policy admits and catches up exactly as the TypeScript one, on 3000 tables', (t) => {
  const r = rng(36);
  const policies: Policy[] = [
    DEFAULT_POLICY,
    { slackNs: 0, maxWaitNs: 1, idleNs: 0, gapNs: 0 },
    { ...DEFAULT_POLICY, slackNs: 10 * MS, gapNs: 5 * MS },
  ];
  let differ = 0;
  let admitted = 0;
  let held = 0;
  for (let i = 0; i < 3000; i++) {
    const now = 1e12 + Math.floor(r() * 1e9);
    const vms = tableAt(r, now);
    const p = policies[i % policies.length];
    for (const self of [...vms.map((v) => v.slot), 999]) {
      const ts = mayPost(self, vms, now, p);
      const c = native.sharePolicy.mayPost(self, vms, now, p);
      const up = catchUp(self, vms, now, p);
      const cUp = native.sharePolicy.catchUp(self, vms, now, p);
      if (ts !== c || up !== cUp) {
        differ++;
        if (differ <= 3) t.log(JSON.stringify({ self, vms, now, p, ts, c, up, cUp }));
      }
      if (ts) admitted++;
      else held++;
    }
  }
  t.is(differ, 0);
  // Both answers came up often: the comparison is not of one kind of table.
  t.true(admitted > 1000 && held > 1000, `admitted ${admitted}, held ${held}`);
});

test("the layout table.ts maps is the addon's, and fits its file", (t) => {
  const L = native.shareLayout;
  t.is(L.magic, 0x71_63_73_68);
  t.true((L.headerWords + L.vmSlots * L.vmWords + L.procSlots * L.procWords) * 8 <= L.bytes);
  t.is(L.bytes % 4096, 0);
  t.true(Math.max(...Object.values(L.vm)) < L.vmWords && Math.max(...Object.values(L.proc)) < L.procWords);
});
