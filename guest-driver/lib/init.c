/* SPDX-License-Identifier: MIT */
/*
 * Start-up (open /dev/qcuda0, HELLO), error handling (per-thread last error,
 * sticky errors), devices and versions.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"

struct qc_state qc = { .fd = -1, .init_err = cudaErrorInitializationError };
int qc_debug_on;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* The context's sticky error (cudaSuccess if none), cleared by cudaDeviceReset. */
static _Atomic int sticky_err;
/* Device the session was last switched to (SET_DEVICE), -1 before. */
static _Atomic int session_device = -1;
/* cudaSetDeviceFlags, per device (we support up to 64 devices). */
#define QC_MAX_DEVICES 64
static _Atomic unsigned int device_flags[QC_MAX_DEVICES];

static __thread cudaError_t last_error;
static __thread int current_device;

/* Device properties, fetched once per device. */
static pthread_mutex_t props_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qcuda_out_device_props *props_cache[QC_MAX_DEVICES];

void qc_msg(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "qcuda: %s\n", buf);
}

int qc_start_thread(void *(*fn)(void *), size_t stack)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (stack)
		pthread_attr_setstacksize(&attr, stack);
	err = pthread_create(&t, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

void qc_debug(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!qc_debug_on)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "qcuda[debug]: %s\n", buf);
}

static void init_once_fn(void)
{
	const char *path = getenv("QCUDA_DEVICE");
	struct qcuda_args_hello hello = {
		.proto_version = QCUDA_PROTO_VERSION,
		.cuda_version = CUDART_VERSION,
	};
	struct qcuda_out_hello out;
	struct qt_result res;
	struct qt_info info;
	int r;

	qc_debug_on = getenv("QCUDA_DEBUG") && *getenv("QCUDA_DEBUG") && strcmp(getenv("QCUDA_DEBUG"), "0");
	if (!path || !*path)
		path = "/dev/qcuda0";

	r = qt_open(path, &qc.fd);
	if (r) {
		qc.init_err = cudaErrorNoDevice;
		qc_msg("no CUDA device: cannot open %s: %s (is the qcuda driver loaded and the "
		       "virtio-qcuda device present?)", path, strerror(-r));
		return;
	}
	r = qt_info(qc.fd, &info);
	if (r) {
		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("%s: QCUDA_IOC_INFO failed: %s (not a qcuda device, or an incompatible "
		       "qcuda driver)", path, strerror(-r));
		return;
	}
	if (info.proto_version != QCUDA_PROTO_VERSION) {
		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("protocol version mismatch: this libcudart.so.13 speaks qcuda protocol v%u, "
		       "the device (%s) speaks v%u; every CUDA call will fail with "
		       "cudaErrorInsufficientDriver", QCUDA_PROTO_VERSION, path, info.proto_version);
		return;
	}
	memset(&out, 0, sizeof(out));
	r = qt_call(qc.fd, QCUDA_CMD_HELLO, &hello, sizeof(hello), &out, sizeof(out),
		    QT_NONE, NULL, 0, &res);
	if (r) {
		qc.init_err = r == -ENOTTY || r == -EINVAL ? cudaErrorInsufficientDriver
							  : cudaErrorInitializationError;
		qc_msg("HELLO to %s failed: %s%s", path, strerror(-r),
		       r == -ENOTTY ? " (the qcuda driver is too old: no QCUDA_IOC_CALL)" : "");
		return;
	}
	qc_output_reply(QCUDA_CMD_HELLO, &res.status);
	if (res.status == QCUDA_ST_VERSION ||
	    (res.status == 0 && out.proto_version != QCUDA_PROTO_VERSION)) {
		/* A refusing backend names its version in value. */
		unsigned int theirs = res.status ? (unsigned int)res.value : out.proto_version;

		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("protocol version mismatch: this libcudart.so.13 speaks qcuda protocol v%u, "
		       "the backend speaks v%u; every CUDA call will fail with "
		       "cudaErrorInsufficientDriver", QCUDA_PROTO_VERSION, theirs);
		return;
	}
	if (res.status != 0) {
		qc.init_err = res.status < QCUDA_ST_BAD_REQUEST ? (cudaError_t)res.status
								: cudaErrorInitializationError;
		qc_msg("the backend refused HELLO: status %#x (%s)", res.status,
		       qc_error_name((int)res.status) ? qc_error_name((int)res.status) : "protocol error");
		return;
	}
	if (res.out_written < sizeof(out)) {
		qc.init_err = cudaErrorInitializationError;
		qc_msg("the backend answered HELLO with %u bytes, expected %zu", res.out_written,
		       sizeof(out));
		return;
	}
	qc.driver_version = out.driver_version;
	qc.device_count = (int)out.device_count;
	qc.capabilities = out.capabilities;
	qc.memory_limit = out.memory_limit;
	if (qc.device_count > QC_MAX_DEVICES)
		qc.device_count = QC_MAX_DEVICES;
	if (qc.device_count <= 0) {
		qc.init_err = cudaErrorNoDevice;
		qc_msg("the backend reports no CUDA device");
		return;
	}
	qc.init_err = cudaSuccess;
	if (qc_debug_on)
		qt_info(qc.fd, &info);	/* the driver opened the session with HELLO */
	qc_debug("session %llu, %d device(s), driver %u, capabilities %#llx, memory limit %llu",
		 (unsigned long long)info.session, qc.device_count, out.driver_version,
		 (unsigned long long)out.capabilities, (unsigned long long)out.memory_limit);
}

cudaError_t qc_init(void)
{
	pthread_once(&init_once, init_once_fn);
	return qc.init_err;
}

cudaError_t qc_ret(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		last_error = err;
	return err;
}

int qc_current_device(void)
{
	return current_device;
}

static int is_sticky(cudaError_t e)
{
	switch ((int)e) {
	case cudaErrorECCUncorrectable:
	case cudaErrorContained:
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorTensorMemoryLeak:
	case cudaErrorExternalDevice:
		return 1;
	default:
		return 0;
	}
}

static cudaError_t map_status(uint32_t cmd, uint32_t status)
{
	cudaError_t e;

	if (status == 0)
		return cudaSuccess;
	if (status < QCUDA_ST_BAD_REQUEST) {
		e = (cudaError_t)status;
		if (is_sticky(e)) {
			int none = cudaSuccess;

			if (atomic_compare_exchange_strong(&sticky_err, &none, (int)e))
				qc_msg("%s (%d): the CUDA context is unusable until cudaDeviceReset",
				       qc_error_name(e) ? qc_error_name(e) : "error", (int)e);
		}
		return e;
	}
	/* Protocol-level refusals mean the library and backend disagree. */
	switch (status) {
	case QCUDA_ST_UNKNOWN_CMD:
		qc_msg("the backend does not know command %u", cmd);
		return cudaErrorNotSupported;
	case QCUDA_ST_TOO_LARGE:
		qc_msg("the backend refused command %u as too large", cmd);
		return cudaErrorInvalidValue;
	case QCUDA_ST_VERSION:
		qc_msg("the backend refused command %u: protocol version mismatch", cmd);
		return cudaErrorInsufficientDriver;
	case QCUDA_ST_NO_SESSION:
		qc_msg("the backend has no session for this process (command %u)", cmd);
		return cudaErrorDevicesUnavailable;
	case QCUDA_ST_BAD_REQUEST:
		qc_msg("the backend refused command %u as malformed", cmd);
		return cudaErrorInvalidValue;
	default:
		qc_msg("the backend answered command %u with unknown status %#x", cmd, status);
		return cudaErrorUnknown;
	}
}

static cudaError_t map_errno(uint32_t cmd, int r)
{
	switch (-r) {
	case EFAULT:	/* a bad user pointer */
	case EINVAL:	/* bad sizes, an invalid HOST_MAP range */
	case E2BIG:
	case EOVERFLOW:
		qc_debug("command %u: %s", cmd, strerror(-r));
		return cudaErrorInvalidValue;
	case ENOMEM:
		return cudaErrorMemoryAllocation;
	case ENODEV:
	case ESHUTDOWN:
		qc_msg("command %u: the qcuda device is gone (%s)", cmd, strerror(-r));
		return cudaErrorDevicesUnavailable;
	case EINTR:
		return cudaErrorUnknown;
	default:
		qc_msg("command %u: ioctl failed: %s", cmd, strerror(-r));
		return cudaErrorUnknown;
	}
}

static cudaError_t raw_call(uint32_t cmd, const void *args, uint32_t args_len, void *out,
			    uint32_t out_len, enum qt_dir dir, void *data, uint64_t data_len,
			    uint64_t *value)
{
	struct qt_result res;
	int r = qt_call(qc.fd, cmd, args, args_len, out, out_len, dir, data, data_len, &res);

	if (r)
		return map_errno(cmd, r);
	qc_output_reply(cmd, &res.status);	/* device output first: CUDA prints it before returning */
	if (value)
		*value = res.value;
	if (res.status == 0 && out_len && dir != QT_FROM_DEVICE && res.out_written < out_len) {
		qc_msg("command %u: the backend wrote %u of %u output bytes", cmd,
		       res.out_written, out_len);
		return cudaErrorUnknown;
	}
	return map_status(cmd, res.status);
}

cudaError_t qc_call(uint32_t cmd, const void *args, uint32_t args_len, void *out,
		    uint32_t out_len, enum qt_dir dir, void *data, uint64_t data_len,
		    uint64_t *value)
{
	qc_flush();
	return raw_call(cmd, args, args_len, out, out_len, dir, data, data_len, value);
}

cudaError_t qc_call_unbatched(uint32_t cmd, const void *args, uint32_t args_len, void *out,
			      uint32_t out_len, enum qt_dir dir, void *data, uint64_t data_len,
			      uint64_t *value)
{
	return raw_call(cmd, args, args_len, out, out_len, dir, data, data_len, value);
}

/* The session has one current device; CUDA has one per thread. Switch the
 * session when the calling thread's differs (only with several devices). */
static cudaError_t sync_device(void)
{
	int dev = current_device;
	struct qcuda_args_device a = { .device = (uint32_t)dev };
	cudaError_t e;

	if (qc.device_count <= 1 || atomic_load(&session_device) == dev)
		return cudaSuccess;
	e = raw_call(QCUDA_CMD_SET_DEVICE, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
	if (e == cudaSuccess)
		atomic_store(&session_device, dev);
	return e;
}

cudaError_t qc_ready(void)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	e = (cudaError_t)atomic_load(&sticky_err);
	if (e != cudaSuccess)
		return e;
	return sync_device();
}

/* ---------------------------------------------------------------- errors */

QC_API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	/* The sticky error is not reported here by itself: the calls that
	 * fail with it set it as the last error (CUDA 13, measured natively). */
	last_error = cudaSuccess;
	return e;
}

QC_API cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

QC_API const char *cudaGetErrorName(cudaError_t error)
{
	const char *s = qc_error_name((int)error);

	return s ? s : "unrecognized error code";
}

QC_API const char *cudaGetErrorString(cudaError_t error)
{
	const char *s = qc_error_string((int)error);

	return s ? s : "unrecognized error code";
}

/* --------------------------------------------------------------- devices */

QC_API cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t e;

	if (!count)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	*count = e == cudaSuccess ? qc.device_count : 0;
	return qc_ret(e);
}

QC_API cudaError_t cudaGetDevice(int *device)
{
	cudaError_t e;

	if (!device)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	*device = current_device;
	return cudaSuccess;
}

QC_API cudaError_t cudaSetDevice(int device)
{
	struct qcuda_args_device a = { .device = (uint32_t)device };
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	e = (cudaError_t)atomic_load(&sticky_err);
	if (e != cudaSuccess)
		return qc_ret(e);
	/* Like CUDA 12+, cudaSetDevice initializes the device's context. */
	e = raw_call(QCUDA_CMD_SET_DEVICE, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
	if (e != cudaSuccess)
		return qc_ret(e);
	atomic_store(&session_device, device);
	current_device = device;
	return cudaSuccess;
}

QC_API cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
	int prev = current_device;
	cudaError_t e;

	if (flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	e = cudaSetDevice(device);
	current_device = prev;
	if (e == cudaSuccess && deviceFlags)
		e = cudaSetDeviceFlags(deviceFlags);
	return e;
}

/* The device's properties from the backend, cached (they do not change). */
static cudaError_t get_props(int device, const struct qcuda_out_device_props **out)
{
	struct qcuda_args_device a = { .device = (uint32_t)device };
	struct qcuda_out_device_props *p;
	cudaError_t e;

	pthread_mutex_lock(&props_lock);
	p = props_cache[device];
	pthread_mutex_unlock(&props_lock);
	if (p) {
		*out = p;
		return cudaSuccess;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return cudaErrorMemoryAllocation;
	e = raw_call(QCUDA_CMD_DEVICE_PROPS, &a, sizeof(a), p, sizeof(*p), QT_NONE, NULL, 0, NULL);
	if (e != cudaSuccess) {
		free(p);
		return e;
	}
	p->name[sizeof(p->name) - 1] = 0;
	pthread_mutex_lock(&props_lock);
	if (props_cache[device]) {	/* another thread was faster */
		free(p);
		p = props_cache[device];
	} else {
		props_cache[device] = p;
	}
	pthread_mutex_unlock(&props_lock);
	*out = p;
	return cudaSuccess;
}

/* Attribute numbers the CUDA 13 runtime accepts (CU_DEVICE_ATTRIBUTE_MAX). */
#define QC_ATTR_MAX 148

QC_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	const struct qcuda_out_device_props *p;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	if (!value || (int)attr < 1 || (int)attr >= QC_ATTR_MAX || (int)attr >= QCUDA_NUM_ATTRS)
		return qc_ret(cudaErrorInvalidValue);
	e = get_props(device, &p);
	if (e != cudaSuccess)
		return qc_ret(e);
	*value = (int)p->attrs[attr];
	return cudaSuccess;
}

QC_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	const struct qcuda_out_device_props *p;
	const __le32 *a;
	cudaError_t e;

	if (!prop)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	e = get_props(device, &p);
	if (e != cudaSuccess)
		return qc_ret(e);
	a = p->attrs;
#define A(n) ((int)a[n])
	memset(prop, 0, sizeof(*prop));
	memcpy(prop->name, p->name, sizeof(prop->name));
	prop->name[sizeof(prop->name) - 1] = 0;
	memcpy(prop->uuid.bytes, p->uuid, sizeof(prop->uuid.bytes));
	/* luid/luidDeviceNodeMask: undefined on Linux (0, as CUDA leaves them). */
	prop->totalGlobalMem = (size_t)p->total_mem;
	prop->sharedMemPerBlock = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerBlock);
	prop->regsPerBlock = A(cudaDevAttrMaxRegistersPerBlock);
	prop->warpSize = A(cudaDevAttrWarpSize);
	prop->memPitch = (size_t)(unsigned)A(cudaDevAttrMaxPitch);
	prop->maxThreadsPerBlock = A(cudaDevAttrMaxThreadsPerBlock);
	prop->maxThreadsDim[0] = A(cudaDevAttrMaxBlockDimX);
	prop->maxThreadsDim[1] = A(cudaDevAttrMaxBlockDimY);
	prop->maxThreadsDim[2] = A(cudaDevAttrMaxBlockDimZ);
	prop->maxGridSize[0] = A(cudaDevAttrMaxGridDimX);
	prop->maxGridSize[1] = A(cudaDevAttrMaxGridDimY);
	prop->maxGridSize[2] = A(cudaDevAttrMaxGridDimZ);
	prop->totalConstMem = (size_t)(unsigned)A(cudaDevAttrTotalConstantMemory);
	prop->major = A(cudaDevAttrComputeCapabilityMajor);
	prop->minor = A(cudaDevAttrComputeCapabilityMinor);
	prop->textureAlignment = (size_t)(unsigned)A(cudaDevAttrTextureAlignment);
	prop->texturePitchAlignment = (size_t)(unsigned)A(cudaDevAttrTexturePitchAlignment);
	prop->multiProcessorCount = A(cudaDevAttrMultiProcessorCount);
	prop->integrated = A(cudaDevAttrIntegrated);
	prop->canMapHostMemory = A(cudaDevAttrCanMapHostMemory);
	prop->maxTexture1D = A(cudaDevAttrMaxTexture1DWidth);
	prop->maxTexture1DMipmap = A(cudaDevAttrMaxTexture1DMipmappedWidth);
	prop->maxTexture2D[0] = A(cudaDevAttrMaxTexture2DWidth);
	prop->maxTexture2D[1] = A(cudaDevAttrMaxTexture2DHeight);
	prop->maxTexture2DMipmap[0] = A(cudaDevAttrMaxTexture2DMipmappedWidth);
	prop->maxTexture2DMipmap[1] = A(cudaDevAttrMaxTexture2DMipmappedHeight);
	prop->maxTexture2DLinear[0] = A(cudaDevAttrMaxTexture2DLinearWidth);
	prop->maxTexture2DLinear[1] = A(cudaDevAttrMaxTexture2DLinearHeight);
	prop->maxTexture2DLinear[2] = A(cudaDevAttrMaxTexture2DLinearPitch);
	prop->maxTexture2DGather[0] = A(cudaDevAttrMaxTexture2DGatherWidth);
	prop->maxTexture2DGather[1] = A(cudaDevAttrMaxTexture2DGatherHeight);
	prop->maxTexture3D[0] = A(cudaDevAttrMaxTexture3DWidth);
	prop->maxTexture3D[1] = A(cudaDevAttrMaxTexture3DHeight);
	prop->maxTexture3D[2] = A(cudaDevAttrMaxTexture3DDepth);
	prop->maxTexture3DAlt[0] = A(cudaDevAttrMaxTexture3DWidthAlt);
	prop->maxTexture3DAlt[1] = A(cudaDevAttrMaxTexture3DHeightAlt);
	prop->maxTexture3DAlt[2] = A(cudaDevAttrMaxTexture3DDepthAlt);
	prop->maxTextureCubemap = A(cudaDevAttrMaxTextureCubemapWidth);
	prop->maxTexture1DLayered[0] = A(cudaDevAttrMaxTexture1DLayeredWidth);
	prop->maxTexture1DLayered[1] = A(cudaDevAttrMaxTexture1DLayeredLayers);
	prop->maxTexture2DLayered[0] = A(cudaDevAttrMaxTexture2DLayeredWidth);
	prop->maxTexture2DLayered[1] = A(cudaDevAttrMaxTexture2DLayeredHeight);
	prop->maxTexture2DLayered[2] = A(cudaDevAttrMaxTexture2DLayeredLayers);
	prop->maxTextureCubemapLayered[0] = A(cudaDevAttrMaxTextureCubemapLayeredWidth);
	prop->maxTextureCubemapLayered[1] = A(cudaDevAttrMaxTextureCubemapLayeredLayers);
	prop->maxSurface1D = A(cudaDevAttrMaxSurface1DWidth);
	prop->maxSurface2D[0] = A(cudaDevAttrMaxSurface2DWidth);
	prop->maxSurface2D[1] = A(cudaDevAttrMaxSurface2DHeight);
	prop->maxSurface3D[0] = A(cudaDevAttrMaxSurface3DWidth);
	prop->maxSurface3D[1] = A(cudaDevAttrMaxSurface3DHeight);
	prop->maxSurface3D[2] = A(cudaDevAttrMaxSurface3DDepth);
	prop->maxSurface1DLayered[0] = A(cudaDevAttrMaxSurface1DLayeredWidth);
	prop->maxSurface1DLayered[1] = A(cudaDevAttrMaxSurface1DLayeredLayers);
	prop->maxSurface2DLayered[0] = A(cudaDevAttrMaxSurface2DLayeredWidth);
	prop->maxSurface2DLayered[1] = A(cudaDevAttrMaxSurface2DLayeredHeight);
	prop->maxSurface2DLayered[2] = A(cudaDevAttrMaxSurface2DLayeredLayers);
	prop->maxSurfaceCubemap = A(cudaDevAttrMaxSurfaceCubemapWidth);
	prop->maxSurfaceCubemapLayered[0] = A(cudaDevAttrMaxSurfaceCubemapLayeredWidth);
	prop->maxSurfaceCubemapLayered[1] = A(cudaDevAttrMaxSurfaceCubemapLayeredLayers);
	prop->surfaceAlignment = (size_t)(unsigned)A(cudaDevAttrSurfaceAlignment);
	prop->concurrentKernels = A(cudaDevAttrConcurrentKernels);
	prop->ECCEnabled = A(cudaDevAttrEccEnabled);
	prop->pciBusID = A(cudaDevAttrPciBusId);
	prop->pciDeviceID = A(cudaDevAttrPciDeviceId);
	prop->pciDomainID = A(cudaDevAttrPciDomainId);
	prop->tccDriver = A(cudaDevAttrTccDriver);
	prop->asyncEngineCount = A(cudaDevAttrAsyncEngineCount);
	prop->unifiedAddressing = A(cudaDevAttrUnifiedAddressing);
	prop->memoryBusWidth = A(cudaDevAttrGlobalMemoryBusWidth);
	prop->l2CacheSize = A(cudaDevAttrL2CacheSize);
	prop->persistingL2CacheMaxSize = A(cudaDevAttrMaxPersistingL2CacheSize);
	prop->maxThreadsPerMultiProcessor = A(cudaDevAttrMaxThreadsPerMultiProcessor);
	prop->streamPrioritiesSupported = A(cudaDevAttrStreamPrioritiesSupported);
	prop->globalL1CacheSupported = A(cudaDevAttrGlobalL1CacheSupported);
	prop->localL1CacheSupported = A(cudaDevAttrLocalL1CacheSupported);
	prop->sharedMemPerMultiprocessor = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
	prop->regsPerMultiprocessor = A(cudaDevAttrMaxRegistersPerMultiprocessor);
	prop->managedMemory = A(cudaDevAttrManagedMemory);
	prop->isMultiGpuBoard = A(cudaDevAttrIsMultiGpuBoard);
	prop->multiGpuBoardGroupID = A(cudaDevAttrMultiGpuBoardGroupID);
	prop->hostNativeAtomicSupported = A(cudaDevAttrHostNativeAtomicSupported);
	prop->pageableMemoryAccess = A(cudaDevAttrPageableMemoryAccess);
	prop->concurrentManagedAccess = A(cudaDevAttrConcurrentManagedAccess);
	prop->computePreemptionSupported = A(cudaDevAttrComputePreemptionSupported);
	prop->canUseHostPointerForRegisteredMem = A(cudaDevAttrCanUseHostPointerForRegisteredMem);
	prop->cooperativeLaunch = A(cudaDevAttrCooperativeLaunch);
	prop->sharedMemPerBlockOptin = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerBlockOptin);
	prop->pageableMemoryAccessUsesHostPageTables = A(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
	prop->directManagedMemAccessFromHost = A(cudaDevAttrDirectManagedMemAccessFromHost);
	prop->maxBlocksPerMultiProcessor = A(cudaDevAttrMaxBlocksPerMultiprocessor);
	prop->accessPolicyMaxWindowSize = A(cudaDevAttrMaxAccessPolicyWindowSize);
	prop->reservedSharedMemPerBlock = (size_t)(unsigned)A(cudaDevAttrReservedSharedMemoryPerBlock);
	prop->hostRegisterSupported = A(cudaDevAttrHostRegisterSupported);
	prop->sparseCudaArraySupported = A(cudaDevAttrSparseCudaArraySupported);
	prop->hostRegisterReadOnlySupported = A(cudaDevAttrHostRegisterReadOnlySupported);
	prop->timelineSemaphoreInteropSupported = A(cudaDevAttrTimelineSemaphoreInteropSupported);
	prop->memoryPoolsSupported = A(cudaDevAttrMemoryPoolsSupported);
	prop->gpuDirectRDMASupported = A(cudaDevAttrGPUDirectRDMASupported);
	prop->gpuDirectRDMAFlushWritesOptions = (unsigned)A(cudaDevAttrGPUDirectRDMAFlushWritesOptions);
	prop->gpuDirectRDMAWritesOrdering = A(cudaDevAttrGPUDirectRDMAWritesOrdering);
	prop->memoryPoolSupportedHandleTypes = (unsigned)A(cudaDevAttrMemoryPoolSupportedHandleTypes);
	prop->deferredMappingCudaArraySupported = A(cudaDevAttrDeferredMappingCudaArraySupported);
	prop->ipcEventSupported = A(cudaDevAttrIpcEventSupport);
	prop->clusterLaunch = A(cudaDevAttrClusterLaunch);
	prop->unifiedFunctionPointers = A(129);	/* CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS */
	prop->deviceNumaConfig = A(cudaDevAttrNumaConfig);
	prop->deviceNumaId = A(cudaDevAttrNumaId);
	prop->mpsEnabled = A(cudaDevAttrMpsEnabled);
	prop->hostNumaId = A(cudaDevAttrHostNumaId);
	prop->gpuPciDeviceID = (unsigned)A(cudaDevAttrGpuPciDeviceId);
	prop->gpuPciSubsystemID = (unsigned)A(cudaDevAttrGpuPciSubsystemId);
	prop->hostNumaMultinodeIpcSupported = A(cudaDevAttrHostNumaMultinodeIpcSupported);
#undef A
	return cudaSuccess;
}

QC_API cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
	unsigned int sched = flags & cudaDeviceScheduleMask;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if ((flags & ~(unsigned)cudaDeviceMask) ||
	    (sched != cudaDeviceScheduleAuto && sched != cudaDeviceScheduleSpin &&
	     sched != cudaDeviceScheduleYield && sched != cudaDeviceScheduleBlockingSync))
		return qc_ret(cudaErrorInvalidValue);
	/* Scheduling is the backend's business; mapped host memory is always
	 * on (unified addressing), as cudaGetDeviceFlags then reports. */
	atomic_store(&device_flags[current_device], flags & ~(unsigned)cudaDeviceMapHost);
	return cudaSuccess;
}

QC_API cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!flags)
		return qc_ret(cudaErrorInvalidValue);
	*flags = atomic_load(&device_flags[current_device]) | cudaDeviceMapHost;
	return cudaSuccess;
}

QC_API cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_deferred(qc_call(QCUDA_CMD_DEVICE_SYNC, NULL, 0, NULL, 0, QT_NONE, NULL, 0, NULL));
	return qc_ret(e);
}

/* Removed from CUDA's headers in 13.0 but still in older programs' sources. */
QC_API cudaError_t cudaThreadSynchronize(void);
QC_API cudaError_t cudaThreadSynchronize(void)
{
	return cudaDeviceSynchronize();
}

QC_API cudaError_t cudaDeviceReset(void)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	e = sync_device();
	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_DEVICE_RESET, NULL, 0, NULL, 0, QT_NONE, NULL, 0, NULL);
	if (e != cudaSuccess)
		return qc_ret(e);
	/* The backend freed the session's allocations, streams and events. */
	qc_mem_reset();
	qc_module_reset();
	qc_handle_reset();
	qc_callback_reset();
	atomic_store(&device_flags[current_device], 0);
	atomic_store(&sticky_err, cudaSuccess);
	(void)qc_deferred(cudaSuccess);	/* errors of work the reset discarded */
	return cudaSuccess;
}

QC_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return qc_ret(cudaErrorInvalidValue);
	/* As CUDA: 0 (and success) when no driver can be reached. */
	*driverVersion = qc_init() == cudaSuccess ? (int)qc.driver_version : 0;
	return cudaSuccess;
}

QC_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return qc_ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemGetInfo(size_t *free_, size_t *total)
{
	struct qcuda_out_mem_info out;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_MEM_GET_INFO, NULL, 0, &out, sizeof(out), QT_NONE, NULL, 0, NULL);
	if (e != cudaSuccess)
		return qc_ret(e);
	if (free_)
		*free_ = (size_t)out.free;
	if (total)
		*total = (size_t)out.total;
	return cudaSuccess;
}

/* For stubs.c: an entry point qcuda does not implement. */
int qc_unsupported(const char *name, int *warned);
int qc_unsupported(const char *name, int *warned)
{
	if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
		qc_msg("%s is not supported by qcuda: returning cudaErrorNotSupported", name);
	return (int)qc_ret(cudaErrorNotSupported);
}

/* A pure function (returns a struct: it cannot be a stub). */
QC_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
							  enum cudaChannelFormatKind f)
{
	struct cudaChannelFormatDesc d = { .x = x, .y = y, .z = z, .w = w, .f = f };

	return d;
}
