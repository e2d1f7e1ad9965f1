// The other process of handover.test.ts: adopts a ring handed to it (as a
// session's GPU worker will adopt its queue) and serves it with an echo
// device, recording what it has in flight, until asked to hand it back.
// Its parent talks to it over fd 3 (workers/channel.ts):
//   in:  { t: 'region', region } + fd   guest RAM to map
//        { t: 'adopt', state, holdMs } + kick, call and in-flight record fds
//        { t: 'detach' }                 hand the ring back and exit
//   out: { t: 'adopted' }, { t: 'state', state, served } after detach
import { EchoDevice } from '../../backend/src/devices/echo';
import { Channel } from '../../backend/src/qcuda/workers/channel';
import { EventFd, Fd } from '../../backend/src/vhost-user';
import { InflightRecord } from '../../backend/src/vhost-user/inflight';
import { MemoryTable } from '../../backend/src/vhost-user/memory';
import type { MemRegion } from '../../backend/src/vhost-user/message';
import { Vring, type RingState } from '../../backend/src/vhost-user/vring';

type In = { t: 'region'; region: MemRegion } | { t: 'adopt'; state: RingState; holdMs: number } | { t: 'detach' };

const memory = new MemoryTable();
let ring: Vring | undefined;
let device: EchoDevice | undefined;

const channel: Channel = new Channel(
  3,
  (m) =>
    void onMessage(m as In).catch((e: Error) => {
      process.stderr.write(`ring-owner: ${e.stack}\n`);
      process.exit(1);
    }),
  () => process.exit(0),
);

function fd(): Fd {
  const f = channel.takeFd();
  if (!f) throw new Error('a message came without its fd');
  return f;
}

async function onMessage(m: In): Promise<void> {
  switch (m.t) {
    case 'region':
      memory.add(m.region, fd());
      return;
    case 'adopt': {
      const kick = new EventFd(fd().take());
      const call = new EventFd(fd().take());
      const record = InflightRecord.open(fd(), m.state.size);
      device = new EchoDevice({ queues: 1, holdMs: m.holdMs });
      ring = Vring.adopt(m.state, { kick, call }, (req) => device!.handle(req), memory, { record });
      channel.send({ t: 'adopted' });
      return;
    }
    case 'detach': {
      const state = await ring!.detach();
      channel.send({ t: 'state', state, served: device!.requests });
      // Let the message go out before the process ends.
      setTimeout(() => process.exit(0), 50);
      return;
    }
  }
}
