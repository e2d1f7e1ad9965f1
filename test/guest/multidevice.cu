// SPDX-License-Identifier: MIT
// multidevice: several devices in one process (issue 37), on a backend
// serving two or more (the emu provider's --host-devices=2): the count,
// each device's properties and memory info, allocations on the current
// device, peer copies byte for byte both ways (cudaMemcpyPeer, and
// cudaMemcpy of kind default between devices), a memset and a download of
// another device's memory, and what is refused (a device past the last, a
// copy past a peer allocation, freed memory). With one device only what one
// device allows: peer copies from device 0 to itself, device 1 refused.
// Peer access too: who may reach whom, P2P attributes, enabling (twice:
// cudaErrorPeerAccessAlreadyEnabled) and disabling (what is not enabled:
// cudaErrorPeerAccessNotEnabled), forgotten at cudaDeviceReset.
#include "qctest.h"

#define N (3 * 4096 + 5)

static unsigned char src[N], out[N];

/* One device: a peer copy of device 0 to itself is a device copy; device 1 does not exist. */
static int one_device(void)
{
	unsigned char *a = NULL;
	int can = -1;

	EXPECT(cudaSetDevice(1), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
	qt_check(can == 0, "device 0 is not its own peer");
	EXPECT(cudaDeviceCanAccessPeer(&can, 0, 1), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported); /* itself: as the driver answers */
	EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorInvalidDevice);
	EXPECT(cudaMalloc((void **)&a, 2 * N), cudaSuccess);
	qt_fill(src, N, 37);
	EXPECT(cudaMemcpy(a, src, N, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpyPeer(a + N, 0, a, 0, N), cudaSuccess);
	EXPECT(cudaMemcpy(out, a + N, N, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(out, src, N) < 0, "device 0 to device 0, byte for byte");
	EXPECT(cudaMemcpyPeer(a, 1, a + N, 0, 16), cudaErrorInvalidDevice);
	EXPECT(cudaFree(a), cudaSuccess);
	return qt_end();
}

/* Peer access between devices 0 and 1 (count devices in all): who may reach whom, the P2P attributes, enabling and disabling. */
static void peer_access(int count)
{
	int can01 = -1, can10 = -1, self = -1, v = -1;

	EXPECT(cudaDeviceCanAccessPeer(&can01, 0, 1), cudaSuccess);
	EXPECT(cudaDeviceCanAccessPeer(&can10, 1, 0), cudaSuccess);
	EXPECT(cudaDeviceCanAccessPeer(&self, 1, 1), cudaSuccess);
	qt_check(can01 == 1 && can10 == 1, "devices 0 and 1 reach each other's memory (%d, %d)", can01, can10);
	qt_check(self == 0, "and a device is not its own peer");
	EXPECT(cudaDeviceCanAccessPeer(&v, 0, count), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceCanAccessPeer(NULL, 0, 1), cudaErrorInvalidValue);

	EXPECT(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 1), cudaSuccess);
	qt_check(v == can01, "P2P attribute: access supported as cudaDeviceCanAccessPeer says (%d)", v);
	EXPECT(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, 0), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrAccessSupported, 0, count), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetP2PAttribute(&v, (cudaDeviceP2PAttr)99, 0, 1), cudaErrorInvalidValue);

	EXPECT(cudaSetDevice(0), cudaSuccess);
	EXPECT(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
	EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported); /* itself: as the driver answers */
	EXPECT(cudaDeviceEnablePeerAccess(count, 0), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
	EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
	EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
	EXPECT(cudaSetDevice(1), cudaSuccess);
	EXPECT(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled); /* enabled from 0 to 1 only */
	EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
	EXPECT(cudaDeviceDisablePeerAccess(0), cudaSuccess);
	EXPECT(cudaSetDevice(0), cudaSuccess);
	EXPECT(cudaDeviceDisablePeerAccess(1), cudaSuccess);
	EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
	EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
	EXPECT(cudaDeviceReset(), cudaSuccess); /* forgets device 0's peer access */
	EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
	EXPECT(cudaDeviceDisablePeerAccess(1), cudaSuccess);
}

int main(void)
{
	int count = 0, dev = -1;
	cudaDeviceProp p0, p1;
	size_t free0 = 0, free1 = 0, total = 0, d0_before = 0;
	unsigned char *a = NULL, *b = NULL;

	qt_begin("multidevice");
	EXPECT(cudaGetDeviceCount(&count), cudaSuccess);
	if (count < 2)
		return one_device();
	EXPECT(cudaGetDeviceProperties(&p0, 0), cudaSuccess);
	EXPECT(cudaGetDeviceProperties(&p1, 1), cudaSuccess);
	qt_check(memcmp(&p0.uuid, &p1.uuid, sizeof(p0.uuid)) != 0, "each device its own uuid");
	/* Domain, bus and device together: GPUs of a cloud VM may each have a PCI domain of their own, all on bus 0. */
	qt_check(p0.pciDomainID != p1.pciDomainID || p0.pciBusID != p1.pciBusID || p0.pciDeviceID != p1.pciDeviceID,
		 "and its own PCI location (%x:%x:%x, %x:%x:%x)", p0.pciDomainID, p0.pciBusID, p0.pciDeviceID,
		 p1.pciDomainID, p1.pciBusID, p1.pciDeviceID);
	EXPECT(cudaSetDevice(count), cudaErrorInvalidDevice);

	EXPECT(cudaMalloc((void **)&a, N), cudaSuccess);
	EXPECT(cudaMemGetInfo(&d0_before, NULL), cudaSuccess);
	EXPECT(cudaSetDevice(1), cudaSuccess);
	EXPECT(cudaGetDevice(&dev), cudaSuccess);
	qt_check(dev == 1, "device 1 is current");
	EXPECT(cudaMemGetInfo(&free1, &total), cudaSuccess);
	EXPECT(cudaMalloc((void **)&b, 8 << 20), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free0, NULL), cudaSuccess);
	qt_check(free1 - free0 >= (8 << 20), "device 1's allocation counts on device 1");
	EXPECT(cudaSetDevice(0), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free0, NULL), cudaSuccess);
	/* Device 0's free memory against its own earlier figure: two devices' free memory says nothing of each other. */
	qt_check(free0 + (8 << 20) > d0_before, "and not on device 0");

	qt_fill(src, N, 37);
	EXPECT(cudaMemcpy(a, src, N, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpyPeer(b, 1, a, 0, N), cudaSuccess);
	EXPECT(cudaMemset(a, 0, N), cudaSuccess);
	EXPECT(cudaMemcpy(out, b, N, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(out, src, N) < 0, "device 0 to device 1, byte for byte (read with device 0 current)");
	EXPECT(cudaMemcpy(a + 1, b + 2, 100, cudaMemcpyDefault), cudaSuccess);
	EXPECT(cudaMemcpy(out, a, 102, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(out[0] == 0 && qt_diff(out + 1, src + 2, 100) < 0, "device 1 to device 0 at offsets, kind default");
	EXPECT(cudaMemcpyPeerAsync(a, 0, b, 1, N, 0), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaMemcpy(out, a, N, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(out, src, N) < 0, "cudaMemcpyPeerAsync back to device 0");
	/* The driver's memset runs on the current device: device 1's memory only with peer access (2 x H100). */
	EXPECT(cudaMemset(b + 10, 0xab, 5), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(out, b + 9, 7, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(out, src + 9, 7) < 0,
		 "a memset of device 1 memory with device 0 current is refused, and writes nothing");

	EXPECT(cudaMemcpyPeer(b, 1, a, 0, N + 1), cudaErrorInvalidValue);
	EXPECT(cudaMemcpyPeer(b, 1, a, 5, 16), cudaErrorInvalidDevice);
	EXPECT(cudaFree(b), cudaSuccess);
	EXPECT(cudaMemcpyPeer(b, 1, a, 0, 16), cudaErrorInvalidValue);
	EXPECT(cudaFree(a), cudaSuccess);
	peer_access(count);
	return qt_end();
}
