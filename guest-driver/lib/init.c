/* SPDX-License-Identifier: MIT */
/*
 * The session's state (the state layer, under the call path): start-up,
 * which opens /dev/qcuda0 and says HELLO once (qc_init) and hooks the call
 * path's flush and output (call.c calls nothing above it), the calling
 * thread's device and the session's (qc_sync_device), each device's
 * properties, and qc_ready, which every entry point starts with.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "qc_os.h"
#include "qcrt.h"

/* Exported (libcudart.map): this runtime library is qcuda's, not NVIDIA's. */
QC_API const char qcuda_libcudart[] = "qcuda libcudart.so.13";

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_once_fn(void)
{
	const char *path = getenv("QCUDA_DEVICE");
	const char *shm = getenv("QCUDA_SHM");
	const char *debug = getenv("QCUDA_DEBUG");
	struct qcuda_args_hello hello = {
		.proto_version = QCUDA_PROTO_VERSION,
		.cuda_version = CUDART_VERSION,
	};
	struct qcuda_out_hello out;
	struct qt_result res;
	struct qt_info info;
	int r;

	/* Before any call: posted work goes first, device output after. */
	qc_call_hooks(qc_flush, qc_output_reply);
	qc_debug_on = debug && *debug && strcmp(debug, "0");
	if (!path || !*path)
		path = "/dev/qcuda0";
	/* The shared-memory transport's region, where named (or where the OS
	 * has one of its own: Windows' IVSHMEM device), is what opens. */
	if (!shm || !*shm)
		shm = qc_os_default_region();
	if (shm && *shm)
		path = shm;

	r = qt_open(path, &qc.fd);
	if (r) {
		qc.init_err = cudaErrorNoDevice;
		if (path == shm)
			qc_msg("no CUDA device: cannot map the shared-memory region %s: %s (QCUDA_SHM "
			       "names a file; without it, on Windows, the VM's IVSHMEM device through "
			       "virtio-win's driver)",
			       path, strerror(-r));
		else
			qc_msg("no CUDA device: cannot open %s: %s (is the qcuda driver loaded and the "
			       "virtio-qcuda device present?)",
			       path, strerror(-r));
		return;
	}
	r = qt_info(qc.fd, &info);
	if (r) {
		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("%s: QCUDA_IOC_INFO failed: %s (not a qcuda device, or an incompatible "
		       "qcuda driver)",
		       path, strerror(-r));
		return;
	}
	if (info.proto_version != QCUDA_PROTO_VERSION) {
		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("protocol version mismatch: this libcudart.so.13 speaks qcuda protocol v%u, "
		       "the device (%s) speaks v%u; every CUDA call will fail with "
		       "cudaErrorInsufficientDriver",
		       QCUDA_PROTO_VERSION, path, info.proto_version);
		return;
	}
	memset(&out, 0, sizeof(out));
	r = qt_call(qc.fd, QCUDA_CMD_HELLO, &hello, sizeof(hello), &out, sizeof(out), QT_NONE, NULL, 0, &res);
	if (r) {
		qc.init_err = r == -ENOTTY || r == -EINVAL ? cudaErrorInsufficientDriver : cudaErrorInitializationError;
		qc_msg("HELLO to %s failed: %s%s", path, strerror(-r),
		       r == -ENOTTY ? " (the qcuda driver is too old: no QCUDA_IOC_CALL)" : "");
		return;
	}
	qc_output_reply(QCUDA_CMD_HELLO, &res.status);
	if (res.status == QCUDA_ST_VERSION || (res.status == 0 && out.proto_version != QCUDA_PROTO_VERSION)) {
		/* A refusing backend names its version in value. */
		unsigned int theirs = res.status ? (unsigned int)res.value : out.proto_version;

		qc.init_err = cudaErrorInsufficientDriver;
		qc_msg("protocol version mismatch: this libcudart.so.13 speaks qcuda protocol v%u, "
		       "the backend speaks v%u; every CUDA call will fail with "
		       "cudaErrorInsufficientDriver",
		       QCUDA_PROTO_VERSION, theirs);
		return;
	}
	if (res.status != 0) {
		qc.init_err =
			res.status < QCUDA_ST_BAD_REQUEST ? (cudaError_t)res.status : cudaErrorInitializationError;
		qc_msg("the backend refused HELLO: status %#x (%s)", res.status,
		       qc_error_name((int)res.status) ? qc_error_name((int)res.status) : "protocol error");
		return;
	}
	if (res.out_written < sizeof(out)) {
		qc.init_err = cudaErrorInitializationError;
		qc_msg("the backend answered HELLO with %u bytes, expected %zu", res.out_written, sizeof(out));
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
		qt_info(qc.fd, &info); /* the driver opened the session with HELLO */
	qc_debug("session %llu, %d device(s), driver %u, capabilities %#llx, memory limit %llu",
		 (unsigned long long)info.session, qc.device_count, out.driver_version,
		 (unsigned long long)out.capabilities, (unsigned long long)out.memory_limit);
}

cudaError_t qc_init(void)
{
	pthread_once(&init_once, init_once_fn);
	return qc.init_err;
}

/* ---------------------------------------------------------------- devices */

/* Device the session was last switched to (SET_DEVICE), -1 before. */
static _Atomic int session_device = -1;
static __thread int current_device;

/* Device properties, fetched once per device. */
static pthread_mutex_t props_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qcuda_out_device_props *props_cache[QC_MAX_DEVICES];

int qc_current_device(void)
{
	return current_device;
}

void qc_set_thread_device(int device)
{
	current_device = device;
}

/* cudaSetDevice switched the session (SET_DEVICE) to device: the thread's too. */
void qc_device_switched(int device)
{
	atomic_store(&session_device, device);
	current_device = device;
}

/* The session has one current device; CUDA has one per thread. Switch the
 * session when the calling thread's differs (only with several devices). */
cudaError_t qc_sync_device(void)
{
	int dev = current_device;
	struct qcuda_args_device a = { .device = (uint32_t)dev };
	cudaError_t e;

	if (qc.device_count <= 1 || atomic_load(&session_device) == dev)
		return cudaSuccess;
	e = qc_call_unbatched(&(struct qc_req){ .cmd = QCUDA_CMD_SET_DEVICE, .args = &a, .args_len = sizeof(a) });
	if (e == cudaSuccess)
		atomic_store(&session_device, dev);
	return e;
}

/* The device's properties from the backend, cached (they do not change). */
cudaError_t qc_device_props(int device, const struct qcuda_out_device_props **out)
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
	e = qc_call_unbatched(&(struct qc_req){
		.cmd = QCUDA_CMD_DEVICE_PROPS, .args = &a, .args_len = sizeof(a), .out = p, .out_len = sizeof(*p) });
	if (e != cudaSuccess) {
		free(p);
		return e;
	}
	p->name[sizeof(p->name) - 1] = 0;
	pthread_mutex_lock(&props_lock);
	if (props_cache[device]) { /* another thread was faster */
		free(p);
		p = props_cache[device];
	} else {
		props_cache[device] = p;
	}
	pthread_mutex_unlock(&props_lock);
	*out = p;
	return cudaSuccess;
}

cudaError_t qc_ready(void)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	e = qc_sticky();
	if (e != cudaSuccess)
		return e;
	return qc_sync_device();
}
