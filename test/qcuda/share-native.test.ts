// The GPU share policy in C (addon/src/share_table.cc, what the ring server
// admits posts by) against the one in TypeScript (qcuda/share/policy.ts, the
// JavaScript gate's): the same answers on the same tables, many of them
// drawn at random, edge cases included (ties at the slack, VMs that want
// nothing, weights of 1 and 1000, busy processes whose pending time counts),
// in MPS mode too (a VM's processes taking turns: who is busy, who waited
// first, ties between two waits).
import test from 'ava';
import { native } from '../../backend/src/sys/native';
import { DEFAULT_POLICY, catchUp, mayPost, type Asker, type Policy, type VmView } from '../../backend/src/qcuda/share/policy';

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
  }))
    .map((v) => (v.waiting > 0 && pick(4) !== 0 ? { ...v, firstWaiting: now - pick(3) * MS } : v))
    .map((v) => (v.busySince.length > 0 && pick(4) !== 0 ? { ...v, turnSince: now - pick(40) * MS } : v));
}

/** The process asking: busy or not, not waiting or waiting since one of the times tableAt draws (so ties come up). */
function askerAt(r: () => number, now: number): Asker {
  const pick = (n: number): number => Math.floor(r() * n);
  return { busy: pick(4) === 0, waitingSince: pick(2) === 0 ? 0 : now - pick(3) * MS };
}

test('the C policy admits and catches up exactly as the TypeScript one, on 3000 tables, with and without MPS mode', (t) => {
  const r = rng(36);
  const policies: Policy[] = [
    DEFAULT_POLICY,
    { slackNs: 0, maxWaitNs: 1, idleNs: 0, gapNs: 0, maxTurnNs: 1 },
    { ...DEFAULT_POLICY, mps: true, maxTurnNs: 20 * MS },
    { ...DEFAULT_POLICY, slackNs: 10 * MS, gapNs: 5 * MS },
    { ...DEFAULT_POLICY, mps: true },
  ];
  let differ = 0;
  const admitted = [0, 0];
  const held = [0, 0];
  for (let i = 0; i < 3000; i++) {
    const now = 1e12 + Math.floor(r() * 1e9);
    const vms = tableAt(r, now);
    const p = policies[i % policies.length];
    for (const self of [...vms.map((v) => v.slot), 999]) {
      const asker = askerAt(r, now);
      const ts = mayPost(self, vms, now, p, asker);
      const c = native.sharePolicy.mayPost(self, vms, now, p, asker);
      const up = catchUp(self, vms, now, p);
      const cUp = native.sharePolicy.catchUp(self, vms, now, p);
      if (ts !== c || up !== cUp) {
        differ++;
        if (differ <= 3) t.log(JSON.stringify({ self, vms, now, p, asker, ts, c, up, cUp }));
      }
      const mps = p.mps === true ? 1 : 0;
      admitted[mps] += ts ? 1 : 0;
      held[mps] += ts ? 0 : 1;
    }
  }
  t.is(differ, 0);
  // Both answers came up often, in either mode: the comparison is not of one kind of table.
  t.true(Math.min(...admitted, ...held) > 300, `admitted ${admitted.join('/')}, held ${held.join('/')} (without/with MPS mode)`);
});

test("the layout table.ts maps is the addon's, and fits its file", (t) => {
  const L = native.shareLayout;
  t.is(L.magic, 0x71_63_73_68);
  t.true((L.headerWords + L.vmSlots * L.vmWords + L.procSlots * L.procWords) * 8 <= L.bytes);
  t.is(L.bytes % 4096, 0);
  t.true(Math.max(...Object.values(L.vm)) < L.vmWords && Math.max(...Object.values(L.proc)) < L.procWords);
});
