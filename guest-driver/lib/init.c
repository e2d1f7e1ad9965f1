/* SPDX-License-Identifier: MIT */
/*
 * Start-up: opens /dev/qcuda0 and says HELLO once (qc_init).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qc_os.h"
#include "qcrt.h"

/* Exported (libcudart.map): this runtime library is qcuda's, not NVIDIA's. */
QC_API const char qcuda_libcudart[] = "qcuda libcudart.so.13";

struct qc_state qc = { .fd = -1, .init_err = cudaErrorInitializationError };

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
