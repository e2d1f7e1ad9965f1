// Where vhost-user-ts reports what it cannot hand back to a caller: a
// frontend's request that failed (rate-limited: the frontend chooses how
// often), a connection that ended on an error, a device reset that failed.
// Whoever creates the server passes one (as libvhost-user takes a panic
// callback); protocol traces go to `debug` (DEBUG=vhost-user:*) instead.
// `info` hears what happened to the connection, a line each (a frontend
// connected or left, a new memory table), rate-limited as errors are.

export interface Logger {
  /** One line, without its newline; it names its source ("vhost-user: ..."). */
  error(line: string): void;
  /** A connection event, one line (optional: an embedder that wants no event log leaves it out). */
  info?(line: string): void;
}

/** The default: each line on the process's stderr. */
export const stderrLogger: Logger = {
  error: (line) => void process.stderr.write(`${line}\n`),
};
