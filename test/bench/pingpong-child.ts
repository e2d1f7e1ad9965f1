// The bare baseline's other end: answers every signal on fd 3 with a signal
// on fd 4, through the same event loop and addon the backend uses.
import { EventFd } from '../../backend/src/vhost-user';

const ping = new EventFd(3);
const pong = new EventFd(4);
ping.watch(() => pong.signal(), true);
process.on('SIGTERM', () => {
  ping.close();
  pong.close();
  process.exit(0);
});
