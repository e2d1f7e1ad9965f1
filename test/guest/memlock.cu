// memlock: pinned host memory counts against RLIMIT_MEMLOCK. The qcuda guest
// driver pins cudaHostRegister'ed pages and allocates cudaHostAlloc,
// cudaMallocHost and cudaMallocManaged memory for as long as the process
// holds them, so it accounts them as pinned (VmPin in /proc/self/status) and
// refuses an unprivileged process past its RLIMIT_MEMLOCK
// (cudaErrorMemoryAllocation); CAP_IPC_LOCK lifts the limit. The program
// starts as root (the guest's init runs it so), opens the device, then drops
// to nobody. qcuda only (prints SKIP elsewhere: NVIDIA's driver does not
// apply the limit, and natively this may not run as root).
#include <sys/mman.h>
#include <sys/resource.h>
#include <grp.h>

#include "qctest.h"

#define MIB (1ul << 20)
#define LIMIT (4 * MIB)

// VmPin of this process, in KiB (-1 if unreadable).
static long vm_pin_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define PINNED(mib, what) qt_check(vm_pin_kib() == (long)((mib)*1024), "%s: VmPin %s MiB", what, #mib)

static bool drop_privileges(void)
{
	return setgroups(0, NULL) == 0 && setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0;
}

int main(void)
{
	struct rlimit rl = { LIMIT, LIMIT };
	unsigned char *buf, *ro;
	void *p = NULL, *q = NULL, *dev = NULL;

	qt_begin("memlock");
	if (!qt_on_qcuda() || geteuid() != 0) {
		printf("SKIP: memlock: needs /dev/qcuda0 and root (qcuda's RLIMIT_MEMLOCK accounting)\n");
		return 0;
	}
	buf = (unsigned char *)aligned_alloc(4096, 8 * MIB);
	memset(buf, 1, 8 * MIB);
	EXPECT(cudaFree(0), cudaSuccess); // opens the device as root
	qt_check(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "RLIMIT_MEMLOCK set to 4 MiB");

	// CAP_IPC_LOCK: the limit does not apply.
	EXPECT(cudaHostRegister(buf, 8 * MIB, 0), cudaSuccess);
	PINNED(8, "root registered 8 MiB");
	EXPECT(cudaHostUnregister(buf), cudaSuccess);
	PINNED(0, "and unregistered them");

	qt_check(drop_privileges(), "dropped to nobody");
	EXPECT(cudaHostRegister(buf, 3 * MIB, 0), cudaSuccess);
	PINNED(3, "registered 3 MiB");
	EXPECT(cudaHostRegister(buf + 3 * MIB, 2 * MIB, 0), cudaErrorMemoryAllocation);
	PINNED(3, "a registration past the limit pins nothing");
	EXPECT(cudaHostRegister(buf + 3 * MIB, MIB, 0), cudaSuccess);
	PINNED(4, "registered 1 MiB more, up to the limit");
	EXPECT(cudaHostAlloc(&p, 64 << 10, cudaHostAllocDefault), cudaErrorMemoryAllocation);
	EXPECT(cudaMallocHost(&p, 4096), cudaErrorMemoryAllocation);
	EXPECT(cudaMallocManaged(&p, 4096), cudaErrorMemoryAllocation);
	PINNED(4, "allocations past the limit pin nothing");

	EXPECT(cudaHostUnregister(buf), cudaSuccess);
	PINNED(1, "unregistered 3 MiB");
	EXPECT(cudaHostAlloc(&p, 2 * MIB, cudaHostAllocDefault), cudaSuccess);
	PINNED(3, "cudaHostAlloc of 2 MiB");
	EXPECT(cudaMallocManaged(&q, 2 * MIB), cudaErrorMemoryAllocation);
	EXPECT(cudaMallocManaged(&q, MIB), cudaSuccess);
	PINNED(4, "cudaMallocManaged of 1 MiB");
	// The memory works.
	memset(p, 0x3c, 2 * MIB);
	EXPECT(cudaMalloc(&dev, 2 * MIB), cudaSuccess);
	EXPECT(cudaMemcpy(dev, p, 2 * MIB, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(buf, dev, 2 * MIB, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_not_byte(buf, 0x3c, 2 * MIB) < 0, "copies through the pinned memory");
	EXPECT(cudaFree(dev), cudaSuccess);
	EXPECT(cudaFreeHost(p), cudaSuccess);
	EXPECT(cudaFree(q), cudaSuccess);
	PINNED(1, "freed them");

	// A registration that fails for another reason gives its pages back too.
	ro = (unsigned char *)mmap(NULL, 2 * MIB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	EXPECT(cudaHostRegister(ro, 2 * MIB, 0), cudaErrorInvalidValue);
	PINNED(1, "a failed registration pins nothing");
	EXPECT(cudaHostUnregister(buf + 3 * MIB), cudaSuccess);
	PINNED(0, "everything unpinned");
	return qt_end();
}
