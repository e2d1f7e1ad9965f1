// Fd, EventFd: the vhost-user library's (vhost-user/platform/fd.ts), which qcuda shares.
export { closeAll, EventFd, Fd } from '../vhost-user';
