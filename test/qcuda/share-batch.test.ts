// The GPU share gate (share/commands.ts) and batches that end with a call:
// one ending with a synchronize has waited for the process's posted work,
// so the process is idle (synced); one ending with a query has not (its
// work may still run), so the process stays busy.
import test from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, QCUDA_BATCH_ENDS_QUERY, QCUDA_BATCH_ENDS_SYNC } from '../../backend/src/qcuda/proto';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';
import type { ShareGate } from '../../backend/src/qcuda/share/gate';
import { started } from '../helpers';
import { frameBatch as frame, QcudaClient } from './client';

test('a batch ending in a synchronize marks the process synced; one ending in a query does not', async (t) => {
  let synced = 0;
  const share = { before: () => undefined, synced: () => void synced++ } as unknown as ShareGate;
  const dev = new QcudaDevice({ provider: emuProvider, queues: 2, share });
  const pair = await started(t, dev, { size: 64 });
  const c = new QcudaClient(pair.fe);
  await c.open();
  const scratch = pair.fe.mem.alloc(4096);
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const record: [number, Uint8Array] = [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: ev, stream: 0n })];
  const send = (cmd: number, flags: number) => {
    const bytes = frame([record, [cmd, encode('qcuda_args_handle', { handle: cmd === Cmd.STREAM_QUERY ? 0n : ev })]]);
    pair.fe.mem.bytes(scratch, bytes.length).set(bytes);
    return c.call(Cmd.BATCH, {
      args: ['qcuda_args_batch', { count: 2, flags, bytes: BigInt(bytes.length) }],
      to: [{ gpa: scratch, len: bytes.length }],
    });
  };
  for (const cmd of [Cmd.EVENT_QUERY, Cmd.STREAM_QUERY]) {
    const r = await send(cmd, QCUDA_BATCH_ENDS_QUERY);
    t.is(r.status, 0);
    t.is(synced, 0, `a batch ending in command ${cmd} leaves the process busy`);
  }
  t.is((await send(Cmd.EVENT_SYNC, QCUDA_BATCH_ENDS_SYNC)).status, 0);
  t.true(synced > 0, 'a batch ending in a synchronize marks it synced');
});
