// The listening socket appears at its path only once it listens (bound under
// a name of its own, then renamed), so a client that connects as soon as it
// sees the file is never refused; a file that is no socket at the path is
// refused as bind refuses it, and nothing is left beside the socket.
import fs from 'node:fs';
import path from 'node:path';
import test from 'ava';
import { native } from '../../backend/src/vhost-user/platform/native';
import { tmpDir } from '../helpers';

test('a unix socket appears at its path already listening, and no staged name is left beside it', (t) => {
  const dir = tmpDir(t);
  for (let i = 0; i < 200; i++) {
    const sock = path.join(dir, `s${i}.sock`);
    const fd = native.unixListen(sock);
    t.true(fs.lstatSync(sock).isSocket());
    const c = native.unixConnect(sock);
    fs.closeSync(c);
    fs.closeSync(fd);
    fs.unlinkSync(sock);
  }
  t.deepEqual(fs.readdirSync(dir), [], 'no staged socket names left');
});

test('a path that holds a file which is no socket is refused, and the file stays as it was', (t) => {
  const file = path.join(tmpDir(t), 'taken');
  fs.writeFileSync(file, 'mine');
  t.throws(() => native.unixListen(file), { message: /EADDRINUSE|in use/i });
  t.is(fs.readFileSync(file, 'utf8'), 'mine');
  t.deepEqual(fs.readdirSync(path.dirname(file)), ['taken']);
});
