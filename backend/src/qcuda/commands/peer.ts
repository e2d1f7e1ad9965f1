// Peer access between the session's devices: whether a device may reach
// another's memory, the P2P attributes, and enabling a context's access to
// a peer's memory (cudaDeviceEnablePeerAccess). The session keeps which
// pairs it enabled, so enabling twice and disabling what is not enabled get
// CUDA's errors whatever the provider does; a reset forgets them all.
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';

/** cudaDeviceP2PAttr: performance rank (1) to CUDA array access (4). */
const P2P_ATTR_MIN = 1;
const P2P_ATTR_MAX = 4;

function checkDevice(c: Call, device: number): void {
  const n = c.dev.provider.deviceCount();
  if (device >= n) throw new CudaError(CudaErr.InvalidDevice, `device ${device} (there are ${n})`);
}

/** 0 or 1: a device never counts as its own peer. */
function canAccess(c: Call, device: number, peer: number): number {
  checkDevice(c, device);
  checkDevice(c, peer);
  if (device === peer) return 0;
  return c.dev.provider.canAccessPeer?.(device, peer) === 1 ? 1 : 0;
}

/** Peer access from device to peer, as Session.peers keeps it. */
export function peerKey(device: number, peer: number): string {
  return `${device}>${peer}`;
}

/** The current device's context and the peer's, after CUDA's checks of the peer. */
function peerPair(c: Call<'PEER_ENABLE' | 'PEER_DISABLE'>): { device: number; peer: number; key: string } {
  const device = c.session.device; // the request's: another thread may switch the session meanwhile
  const { peer } = c.args;
  checkDevice(c, peer);
  return { device, peer, key: peerKey(device, peer) };
}

export const RUNS: Runs<'CAN_ACCESS_PEER' | 'P2P_ATTRIBUTE' | 'PEER_ENABLE' | 'PEER_DISABLE'> = {
  async CAN_ACCESS_PEER(c) {
    return { value: BigInt(canAccess(c, c.args.device, c.args.peer)) };
  },

  async P2P_ATTRIBUTE(c) {
    const { attr, device, peer } = c.args;
    checkDevice(c, device);
    checkDevice(c, peer);
    if (device === peer) throw new CudaError(CudaErr.InvalidDevice, `the P2P attributes of device ${device} and itself`);
    if (attr < P2P_ATTR_MIN || attr > P2P_ATTR_MAX) throw new CudaError(CudaErr.InvalidValue, `P2P attribute ${attr}`);
    return { value: BigInt(c.dev.provider.p2pAttribute?.(attr, device, peer) ?? 0) };
  },

  async PEER_ENABLE(c) {
    const { device, peer, key } = peerPair(c);
    // A device and itself too (canAccess says 0): the driver answers so (measured, H100, driver 580).
    if (canAccess(c, device, peer) !== 1)
      throw new CudaError(CudaErr.PeerAccessUnsupported, `device ${device} cannot reach device ${peer}'s memory`);
    if (c.session.peers.has(key)) throw new CudaError(CudaErr.PeerAccessAlreadyEnabled, `device ${device} to ${peer}: already enabled`);
    c.session.peers.add(key); // before the awaits: a second enable meanwhile is refused
    try {
      const p = c.dev.provider;
      if (p.enablePeerAccess) {
        const [x, y] = await Promise.all([c.session.context(device), c.session.context(peer)]);
        await p.enablePeerAccess(x, y);
      }
    } catch (e) {
      c.session.peers.delete(key);
      throw e;
    }
  },

  async PEER_DISABLE(c) {
    const { device, peer, key } = peerPair(c);
    if (!c.session.peers.has(key)) throw new CudaError(CudaErr.PeerAccessNotEnabled, `device ${device} to ${peer}: not enabled`);
    c.session.peers.delete(key);
    const p = c.dev.provider;
    if (!p.disablePeerAccess) return;
    const [x, y] = await Promise.all([c.session.context(device), c.session.context(peer)]);
    await p.disablePeerAccess(x, y);
  },
};
