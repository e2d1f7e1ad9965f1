// The GPU identity a VM's guest sees (security review 3, N11). The host
// GPU's UUID and PCI location would tell VMs that they share a GPU (the
// first step of a side channel between them), so by default each VM sees a
// UUID of its own, derived from the real one with a key its backend draws at
// random (HMAC-SHA-256, formatted as a version 4 UUID): stable while the
// backend runs, so every process of the VM (and the worker serving a
// session's own queue, which gets the key with its queue) reports the same,
// and unrelated to another VM's. The PCI location is a neutral one: domain
// 0, bus device index + 1, device 0. The guest's NVML and libcuda's
// integrity check read the values libcuda reports, so they agree with it.
// --real-gpu-identity passes the real ones through (no key).
import { createHmac, randomBytes } from 'node:crypto';

/** CUdevice_attribute PCI_BUS_ID, PCI_DEVICE_ID, PCI_DOMAIN_ID. */
export const ATTR_PCI_BUS_ID = 33;
export const ATTR_PCI_DEVICE_ID = 34;
export const ATTR_PCI_DOMAIN_ID = 50;

/** A VM's key: its backend's, drawn once. */
export function identityKey(): Uint8Array {
  return new Uint8Array(randomBytes(32));
}

/** The UUID the VM with key sees for the GPU whose UUID is real: HMAC-SHA-256(key, real), 16 bytes, as a version 4 UUID. */
export function vmUuid(key: Uint8Array, real: Uint8Array): Uint8Array {
  const u = new Uint8Array(createHmac('sha256', key).update(real).digest().subarray(0, 16));
  u[6] = (u[6] & 0x0f) | 0x40;
  u[8] = (u[8] & 0x3f) | 0x80;
  return u;
}

/** Puts the neutral PCI location of the VM's device `device` into its attributes. */
export function neutralPci(attrs: Uint32Array, device: number): void {
  attrs[ATTR_PCI_DOMAIN_ID] = 0;
  attrs[ATTR_PCI_BUS_ID] = device + 1;
  attrs[ATTR_PCI_DEVICE_ID] = 0;
}
