// The log rate limit: the vhost-user library's (vhost-user/platform/log-limiter.ts), which qcuda shares.
export { LogLimiter, printable } from '../vhost-user';
