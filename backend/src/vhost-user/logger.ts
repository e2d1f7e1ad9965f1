// Where vhost-user-ts reports what it cannot hand back to a caller: a
// frontend's request that failed (rate-limited: the frontend chooses how
// often), a connection that ended on an error, a device reset that failed.
// Whoever creates the server passes one (as libvhost-user takes a panic
// callback); protocol traces go to `debug` (DEBUG=qcuda:vhost-user*) instead.

export interface Logger {
  /** One line, without its newline; it names its source ("vhost-user: ..."). */
  error(line: string): void;
}

/** The default: each line on the process's stderr. */
export const stderrLogger: Logger = {
  error: (line) => void process.stderr.write(`${line}\n`),
};
