// Polling while busy: the vhost-user library's (vhost-user/platform/busy-poll.ts), which qcuda's providers share.
export { BusyPoll, type PollCheck, type Quiet } from '../vhost-user';
