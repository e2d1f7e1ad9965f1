/* SPDX-License-Identifier: MIT */
/*
 * poolipc: a memory pool shared between two processes of one VM (qcuda
 * run's test), as NCCL and PyTorch share theirs. The exporter makes a pool
 * with a POSIX file descriptor handle type, allocates from it on a stream
 * and writes; it passes the pool's descriptor over a unix socket
 * (SCM_RIGHTS) with the pointer's export data to a child it forks and
 * execs. The importer imports the pool and the pointer, reads the
 * exporter's bytes and writes its own, frees the pointer (cuMemFree), then
 * imports it again and frees it with cuMemFreeAsync; the exporter reads the
 * importer's bytes. The refusals: exporting a pool made without a handle
 * type, or a pointer of such a pool; a handle type the pool was not made
 * with; importing with a wrong handle type; forged export data; export data
 * imported into a pool that is not the exporter's; allocating from an
 * imported pool. Only success or refusal is printed (not the error names),
 * so that NVIDIA's driver prints the same.
 * Prints ok/FAIL lines and ends with PASS or FAIL.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define SIZE 4096

static int all(const unsigned char *b, unsigned char v)
{
	for (int i = 0; i < SIZE; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

static CUmemPoolProps props(CUmemAllocationHandleType type)
{
	CUmemPoolProps p;

	memset(&p, 0, sizeof(p));
	p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.handleTypes = type;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	return p;
}

/* The pool's descriptor and the pointer's export data, in one message. */
static int send_pool(int sock, int fd, const CUmemPoolPtrExportData *data)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = (void *)data, .iov_len = sizeof(*data) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;

	memset(ctl, 0, sizeof(ctl));
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, 0) == (ssize_t)sizeof(*data) ? 0 : -1;
}

static int recv_pool(int sock, int *fd, CUmemPoolPtrExportData *data)
{
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = data, .iov_len = sizeof(*data) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;

	if (recvmsg(sock, &m, 0) != (ssize_t)sizeof(*data))
		return -1;
	c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

/* The importer's refusals: a wrong handle type, forged data, data put to a
 * pool that is not the exporter's, an allocation from the imported pool. */
static void importer_refusals(int fd, CUmemoryPool pool, const CUmemPoolPtrExportData *data)
{
	CUmemPoolPtrExportData forged = *data;
	CUmemPoolProps own = props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CUmemoryPool other = NULL, wrong = NULL;
	CUdeviceptr p = 0;

	check(cuMemPoolImportFromShareableHandle(&wrong, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_WIN32, 0) !=
		      CUDA_SUCCESS,
	      "importer: a handle type the pool was not exported as is refused");
	for (int i = 0; i < 16; i++)
		forged.reserved[i] ^= 0x5a;
	check(cuMemPoolImportPointer(&p, pool, &forged) != CUDA_SUCCESS, "importer: forged export data is refused");
	check(cuMemPoolCreate(&other, &own) == CUDA_SUCCESS &&
		      cuMemPoolImportPointer(&p, other, (void *)data) != CUDA_SUCCESS,
	      "importer: export data put to a pool of its own is refused");
	if (other)
		cuMemPoolDestroy(other);
	check(cuMemAllocFromPoolAsync(&p, SIZE, pool, NULL) != CUDA_SUCCESS,
	      "importer: no allocation from an imported pool");
}

static int importer(int sock)
{
	unsigned char buf[SIZE];
	CUmemPoolPtrExportData data;
	CUmemoryPool pool = NULL;
	CUdeviceptr p = 0;
	int fd = -1;

	primary_context();
	if (!check(recv_pool(sock, &fd, &data) == 0, "importer: receives the pool's descriptor and the pointer's data"))
		return finish("poolipc importer");
	OK(cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					      0));
	importer_refusals(fd, pool, &data);
	OK(cuMemPoolImportPointer(&p, pool, &data));
	check(cuMemcpyDtoH(buf, p, SIZE) == CUDA_SUCCESS && all(buf, 0x5a), "importer: reads the exporter's bytes");
	memset(buf, 0xa5, SIZE);
	check(cuMemcpyHtoD(p, buf, SIZE) == CUDA_SUCCESS, "importer: writes its own");
	check(cuMemFree(p) == CUDA_SUCCESS, "importer: frees the imported pointer (cuMemFree)");
	memset(buf, 0, SIZE);
	check(cuMemPoolImportPointer(&p, pool, &data) == CUDA_SUCCESS && cuMemcpyDtoH(buf, p, SIZE) == CUDA_SUCCESS &&
		      all(buf, 0xa5),
	      "importer: imports it again and reads it");
	check(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS && cuStreamSynchronize(NULL) == CUDA_SUCCESS,
	      "importer: frees it on a stream (cuMemFreeAsync)");
	OK(cuMemPoolDestroy(pool));
	close(fd);
	return finish("poolipc importer");
}

/* Forks and execs the importer with its end of a socket; the exporter's end in *sock. */
static pid_t spawn(int *sock)
{
	int sv[2];
	char arg[16];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		snprintf(arg, sizeof(arg), "%d", sv[1]);
		execl("/proc/self/exe", "poolipc", "importer", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

/* The exporter's refusals: a pool made without a handle type, its pointers, a handle type not the pool's. */
static void exporter_refusals(CUmemoryPool pool)
{
	CUmemPoolProps none = props(CU_MEM_HANDLE_TYPE_NONE);
	CUmemPoolPtrExportData data;
	CUmemoryPool plain = NULL;
	CUdeviceptr p = 0;
	int fd = -1;

	OK(cuMemPoolCreate(&plain, &none));
	check(cuMemPoolExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS,
	      "exporter: a pool made without a handle type is not exported");
	check(cuMemAllocFromPoolAsync(&p, SIZE, plain, NULL) == CUDA_SUCCESS &&
		      cuMemPoolExportPointer(&data, p) != CUDA_SUCCESS,
	      "exporter: nor its pointers");
	check(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS && cuMemPoolDestroy(plain) == CUDA_SUCCESS,
	      "exporter: frees it, destroys it");
	check(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_WIN32, 0) != CUDA_SUCCESS,
	      "exporter: a handle type the pool was not made with is refused");
}

int main(int argc, char **argv)
{
	unsigned char buf[SIZE];
	CUmemPoolProps fdprops = props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CUmemPoolPtrExportData data;
	CUmemoryPool pool = NULL;
	CUdeviceptr a = 0;
	int fd = -1, sock = -1, st = 0;
	pid_t pid;

	if (argc > 2 && !strcmp(argv[1], "importer"))
		return importer(atoi(argv[2]));
	primary_context();
	OK(cuMemPoolCreate(&pool, &fdprops));
	exporter_refusals(pool);
	OK(cuMemAllocFromPoolAsync(&a, SIZE, pool, NULL));
	memset(buf, 0x5a, SIZE);
	check(cuStreamSynchronize(NULL) == CUDA_SUCCESS && cuMemcpyHtoD(a, buf, SIZE) == CUDA_SUCCESS,
	      "exporter: writes");
	OK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	OK(cuMemPoolExportPointer(&data, a));
	pid = spawn(&sock);
	check(pid > 0 && send_pool(sock, fd, &data) == 0,
	      "exporter: sends the descriptor and the data to the importer");
	check(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the importer imported, read and wrote, and exited 0");
	memset(buf, 0, SIZE);
	check(cuMemcpyDtoH(buf, a, SIZE) == CUDA_SUCCESS && all(buf, 0xa5), "exporter: reads the importer's bytes");
	OK(cuMemFreeAsync(a, NULL));
	OK(cuStreamSynchronize(NULL));
	OK(cuMemPoolDestroy(pool));
	close(fd);
	close(sock);
	return finish("poolipc");
}
