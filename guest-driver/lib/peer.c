/* SPDX-License-Identifier: MIT */
/*
 * Peer access between the process's devices: whether one device may reach
 * another's memory, the P2P attributes, and enabling the current device's
 * access to a peer's memory. The backend answers all of it and keeps which
 * peers are enabled (until cudaDeviceReset), so enabling twice and disabling
 * what is not enabled get CUDA's errors (704, 705).
 */
#include "qcrt.h"
#include "qc_calls.h"

static int valid_device(int device)
{
	return device >= 0 && device < qc.device_count;
}

/* The checks of a query about two devices, in CUDA's order: the library,
 * the answer's pointer, the devices. */
static cudaError_t pair_checks(const int *out, int a, int b)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	if (!out)
		return cudaErrorInvalidValue;
	return valid_device(a) && valid_device(b) ? cudaSuccess : cudaErrorInvalidDevice;
}

/* A device is not its own peer: CUDA answers 0 for device == peerDevice. */
QC_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	uint64_t v = 0;
	cudaError_t e = pair_checks(canAccessPeer, device, peerDevice);

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device == peerDevice) {
		*canAccessPeer = 0;
		return cudaSuccess;
	}
	e = qc_req_can_access_peer((uint32_t)device, (uint32_t)peerDevice, 0, &v);
	if (e == cudaSuccess)
		*canAccessPeer = v == 1;
	return qc_ret(e);
}

QC_API cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice)
{
	uint64_t v = 0;
	cudaError_t e = pair_checks(value, srcDevice, dstDevice);

	if (e != cudaSuccess)
		return qc_ret(e);
	e = qc_req_p2p_attribute((uint32_t)srcDevice, (uint32_t)dstDevice, (uint32_t)attr, &v);
	if (e == cudaSuccess)
		*value = (int)v;
	return qc_ret(e);
}

/* For the calling thread's current device (the session is switched to it first). */
QC_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	cudaError_t e;

	QC_ENTER(e);
	if (flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	if (!valid_device(peerDevice))
		return qc_ret(cudaErrorInvalidDevice);
	return qc_ret(qc_req_peer_enable((uint32_t)qc_current_device(), (uint32_t)peerDevice, 0));
}

QC_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
	cudaError_t e;

	QC_ENTER(e);
	if (!valid_device(peerDevice))
		return qc_ret(cudaErrorInvalidDevice);
	return qc_ret(qc_req_peer_disable((uint32_t)qc_current_device(), (uint32_t)peerDevice, 0));
}
