// Limits of JavaScript numbers: the vhost-user library's (vhost-user/platform/numbers.ts), which qcuda shares.
export { MAX_SAFE_BIG } from '../vhost-user';
