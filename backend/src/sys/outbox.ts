// The socket write queue: the vhost-user library's (vhost-user/platform/outbox.ts), which qcuda's worker channel shares.
export { Outbox } from '../vhost-user';
