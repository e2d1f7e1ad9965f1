// The options of vm and run that are their backend's, declared once: the
// command line (qcuda.ts) and a Windows VM's checks (windows-vm.ts) both
// read them from here, since windows-vm.ts cannot import qcuda.ts (which
// imports it).

/** The backend options vm and run pass on to their backend, checked before anything starts (qcuda.ts). */
export const BACKEND_PASSED = [
  'provider',
  'gpu',
  'host-devices',
  'isolation',
  'own-queues',
  'ring-server',
  'pin-guest-ram',
  'real-gpu-identity',
  'worker-sandbox',
  'context-overhead',
  'gpu-share',
  'gpu-share-mps',
  'device-memory-limit',
];

/** What vm and run bound their backends with (vm/host-bounds.ts). */
export const HOST_BOUND_OPTIONS = ['host-memory-max', 'host-tasks-max', 'host-cpu-quota'];
