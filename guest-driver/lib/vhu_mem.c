/* SPDX-License-Identifier: MIT */
/*
 * The userspace transport's "guest RAM": memfd regions shared with the
 * backend (ADD_MEM_REG, as QEMU sends a hot-plugged DIMM), the pinned host
 * memory carved from them (cudaHostAlloc, cudaMallocHost, managed memory),
 * the mappings the library makes of it, and the translation of a pointer
 * into any of them to a guest-physical address. See vhu.h.
 *
 * Freed host memory stays in its region and is zeroed when it is handed out
 * again: a backend's worker registers whole regions with the GPU (pinned),
 * so their pages must stay the file's (punching a hole would leave the GPU
 * with the old ones).
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vhu.h"

#define VHU_MAX_REGIONS 32 /* the backend's memory slots */
#define VHU_ALIGN (2ull << 20)
/* The smallest region host memory is carved from; regions double up to
 * VHU_HEAP_MAX, so a process with much pinned memory uses few slots. */
#define VHU_HEAP_MIN (64ull << 20)
#define VHU_HEAP_MAX (4ull << 30)

struct region {
	uint8_t *va;
	uint64_t gpa, size;
	uint64_t file_off; /* of va in fd (the shared-memory transport's file) */
	uint64_t touched; /* heap: bytes from its start ever handed out */
	int fd;
	int heap; /* host memory is carved from it */
};

/* A piece of host memory (vhu_mem_alloc) or a mapping of one (an alias). */
struct piece {
	uint64_t gpa, size;
	uint8_t *va; /* alias: where it is mapped; else NULL */
	uintptr_t adopted; /* alias of registered memory: the address registered */
};

static struct region regions[VHU_MAX_REGIONS];
static unsigned int nregions;
static uint64_t next_gpa = VHU_GPA_BASE;
static struct piece *pieces; /* allocations, sorted by gpa */
static size_t npieces, cap_pieces;
static struct piece *aliases;
static size_t naliases, cap_aliases;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
/* The shared-memory transport's data area (vhu_mem_use_file), if in use. */
static struct {
	uint8_t *va;
	uint64_t gpa, file_off, size, next;
	int fd;
} file;

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static int grow(struct piece **v, size_t *cap, size_t n)
{
	struct piece *p;

	if (n < *cap)
		return 0;
	p = realloc(*v, (*cap ? *cap * 2 : 64) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = *cap ? *cap * 2 : 64;
	return 0;
}

void vhu_mem_use_file(int fd, uint8_t *va, uint64_t gpa, uint64_t file_off, uint64_t size)
{
	file.fd = fd, file.va = va, file.gpa = gpa, file.file_off = file_off, file.size = size;
	next_gpa = gpa;
}

/* A region carved from the file's data area: the backend has it already.
 * Host memory takes all that is left at once (there is no more to grow
 * into), and is zeroed as it is handed out: the file may hold an earlier
 * process's bytes. */
static int carve_region(uint64_t size, int heap, struct region **out)
{
	struct region *r;

	size = round_up(size, VHU_ALIGN);
	if (nregions == VHU_MAX_REGIONS || size > file.size - file.next)
		return -ENOSPC;
	if (heap)
		size = file.size - file.next;
	r = &regions[nregions++];
	*r = (struct region){ .va = file.va + file.next,
			      .gpa = file.gpa + file.next,
			      .size = size,
			      .fd = file.fd,
			      .file_off = file.file_off + file.next,
			      .heap = heap,
			      .touched = heap ? size : 0 };
	file.next += size;
	*out = r;
	return 0;
}

/* -errno of the call that just failed; never 0, so that a caller that
 * reads its out parameter on 0 cannot meet one never written. */
static int neg_errno(void)
{
	int e = errno;

	return e > 0 ? -e : -EIO;
}

/* A new region (under the write lock, or before any other thread runs). */
static int add_region(uint64_t size, int heap, struct region **out)
{
	struct {
		uint64_t pad, gpa, size, uaddr, offset;
	} msg;
	struct region *r;
	void *va;
	int fd, e;

	if (file.va)
		return carve_region(size, heap, out);
	if (nregions == VHU_MAX_REGIONS)
		return -ENOSPC;
	size = round_up(size, VHU_ALIGN);
	fd = memfd_create("qcuda-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return neg_errno();
	/* Sealed at its size: a backend serving many programs refuses a
	 * region that could be cut short under its mapping (SIGBUS). */
	if (ftruncate(fd, (off_t)size) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)) {
		e = neg_errno();
		close(fd);
		return e;
	}
	va = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (va == MAP_FAILED) {
		e = neg_errno();
		close(fd);
		return e;
	}
	/* A forked child must not scribble on what the backend reads. Huge
	 * pages where the host's shmem allows them (shmem_enabled=advise):
	 * fewer pages for the GPU to map and walk. */
	madvise(va, size, MADV_DONTFORK);
	madvise(va, size, MADV_HUGEPAGE);
	msg = (typeof(msg)){ .gpa = next_gpa, .size = size, .uaddr = (uintptr_t)va };
	e = vhu_request(VHU_ADD_MEM_REG, &msg, sizeof(msg), fd, 0, NULL, 0);
	if (e) {
		munmap(va, size);
		close(fd);
		return e;
	}
	r = &regions[nregions++];
	*r = (struct region){ .va = va, .gpa = next_gpa, .size = size, .fd = fd, .heap = heap };
	/* A guard gap: no descriptor can run from one region into the next. */
	next_gpa += size + VHU_ALIGN;
	*out = r;
	return 0;
}

int vhu_mem_region(uint64_t size, void **va, uint64_t *gpa)
{
	struct region *r;
	int e;

	pthread_rwlock_wrlock(&lock);
	e = add_region(size, 0, &r);
	pthread_rwlock_unlock(&lock);
	if (e)
		return e;
	*va = r->va;
	*gpa = r->gpa;
	return 0;
}

static struct region *region_of(uint64_t gpa, uint64_t len)
{
	for (unsigned int i = 0; i < nregions; i++) {
		struct region *r = &regions[i];

		if (gpa >= r->gpa && len <= r->size && gpa - r->gpa <= r->size - len)
			return r;
	}
	return NULL;
}

/* The first gap of size bytes in heap region r (pieces sorted by gpa), or 0;
 * *at: where a piece there goes in the list. */
static uint64_t gap_in(const struct region *r, uint64_t size, size_t *at)
{
	uint64_t start = r->gpa;
	size_t i;

	for (i = 0; i < npieces && pieces[i].gpa < r->gpa + r->size; i++) {
		if (pieces[i].gpa < r->gpa)
			continue;
		if (pieces[i].gpa - start >= size)
			break;
		start = pieces[i].gpa + pieces[i].size;
	}
	*at = i;
	return r->gpa + r->size - start >= size ? start : 0;
}

int vhu_mem_alloc(uint64_t size, uint64_t *gpa)
{
	static uint64_t next_heap = VHU_HEAP_MIN;
	struct region *r = NULL;
	uint64_t at = 0, off;
	size_t idx = 0;
	int e = 0;

	size = round_up(size, (uint64_t)sysconf(_SC_PAGESIZE));
	pthread_rwlock_wrlock(&lock);
	for (unsigned int i = 0; i < nregions && !at; i++)
		if (regions[i].heap && (at = gap_in(&regions[i], size, &idx)))
			r = &regions[i];
	if (!at) {
		e = add_region(size > next_heap ? size : next_heap, 1, &r);
		if (!e) {
			assert(r); /* add_region sets it whenever it returns 0 */
			if (next_heap < VHU_HEAP_MAX)
				next_heap *= 2;
			at = gap_in(r, size, &idx);
		}
	}
	if (!e)
		e = grow(&pieces, &cap_pieces, npieces);
	if (!e) {
		memmove(&pieces[idx + 1], &pieces[idx], (npieces - idx) * sizeof(*pieces));
		pieces[idx] = (struct piece){ .gpa = at, .size = size };
		npieces++;
		/* Memory never handed out is the file's zeroes already. */
		off = at - r->gpa;
		if (off < r->touched)
			memset(r->va + off, 0, (r->touched - off < size ? r->touched - off : size));
		if (off + size > r->touched)
			r->touched = off + size;
		*gpa = at;
	}
	pthread_rwlock_unlock(&lock);
	return e;
}

int vhu_mem_free(uint64_t gpa)
{
	size_t i, j;
	int e = -EINVAL;

	pthread_rwlock_wrlock(&lock);
	for (i = 0; i < npieces; i++) {
		if (pieces[i].gpa != gpa)
			continue;
		memmove(&pieces[i], &pieces[i + 1], (npieces - i - 1) * sizeof(*pieces));
		npieces--;
		e = 0;
		break;
	}
	/* Its mappings are gone (the library unmapped them first). */
	for (i = j = 0; i < naliases; i++)
		if (aliases[i].gpa != gpa)
			aliases[j++] = aliases[i];
	naliases = j;
	pthread_rwlock_unlock(&lock);
	return e;
}

void *vhu_mem_map(uint64_t gpa, size_t len, void *want)
{
	struct region *r;
	void *p = MAP_FAILED;

	pthread_rwlock_wrlock(&lock);
	r = region_of(gpa, len);
	if (r && r->heap && grow(&aliases, &cap_aliases, naliases) == 0) {
		off_t off = (off_t)(r->file_off + gpa - r->gpa);

		if (want) {
			p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, r->fd, off);
			if (p != MAP_FAILED && p != want) {
				munmap(p, len); /* kernels before 4.17 took it as a hint */
				p = MAP_FAILED;
			}
		}
		if (p == MAP_FAILED)
			p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, off);
		if (p != MAP_FAILED) {
			madvise(p, len, MADV_DONTFORK);
			aliases[naliases++] = (struct piece){ .gpa = gpa, .size = len, .va = p };
		}
	}
	pthread_rwlock_unlock(&lock);
	return p == MAP_FAILED ? NULL : p;
}

/* The alias of registered memory at addr (under the lock), or NULL. */
static struct piece *adopted_at(uintptr_t addr)
{
	for (size_t i = 0; i < naliases; i++)
		if (aliases[i].adopted == addr)
			return &aliases[i];
	return NULL;
}

static int overlaps_alias(uintptr_t start, uint64_t len)
{
	for (size_t i = 0; i < naliases; i++)
		if (start < (uintptr_t)aliases[i].va + aliases[i].size && (uintptr_t)aliases[i].va < start + len)
			return 1;
	return 0;
}

int vhu_mem_adopt(void *addr, uint64_t size, uint64_t *gpa)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(page - 1);
	uint64_t len = round_up((uintptr_t)addr + size, page) - start, at;
	struct region *r;
	void *p;
	int e;

	pthread_rwlock_rdlock(&lock);
	e = overlaps_alias(start, len) ? -EEXIST : 0;
	pthread_rwlock_unlock(&lock);
	if (e || (e = vhu_mem_alloc(len, &at)))
		return e;
	pthread_rwlock_wrlock(&lock);
	r = region_of(at, len);
	e = grow(&aliases, &cap_aliases, naliases);
	if (!e) {
		/* The program's bytes move into the piece, whose pages then take
		 * the place of its own (one mmap: the range is never unmapped). */
		memcpy(r->va + (at - r->gpa), (void *)start, len);
		p = mmap((void *)start, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd,
			 (off_t)(r->file_off + at - r->gpa));
		e = p == MAP_FAILED ? -errno : 0;
	}
	if (!e) {
		aliases[naliases++] =
			(struct piece){ .gpa = at, .size = len, .va = (uint8_t *)start, .adopted = (uintptr_t)addr };
		*gpa = at + ((uintptr_t)addr - start);
	}
	pthread_rwlock_unlock(&lock);
	if (e)
		vhu_mem_free(at);
	return e;
}

int vhu_mem_release(void *addr)
{
	struct piece a = { 0 }, *found;
	void *tmp;

	pthread_rwlock_rdlock(&lock);
	found = adopted_at((uintptr_t)addr);
	if (found)
		a = *found;
	pthread_rwlock_unlock(&lock);
	if (!a.va)
		return -EINVAL;
	/* Private pages again, with the bytes as they are now: a copy moved
	 * into place in one step. */
	tmp = mmap(NULL, a.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return -errno;
	memcpy(tmp, a.va, a.size);
	if (mremap(tmp, a.size, a.size, MREMAP_MAYMOVE | MREMAP_FIXED, a.va) == MAP_FAILED) {
		int e = -errno;

		munmap(tmp, a.size);
		return e;
	}
	return vhu_mem_free(a.gpa);
}

uint64_t vhu_mem_gpa(const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p;
	uint64_t gpa = 0;

	pthread_rwlock_rdlock(&lock);
	for (size_t i = naliases; i-- > 0 && !gpa;) {
		const struct piece *m = &aliases[i];

		if (a >= (uintptr_t)m->va && len <= m->size && a - (uintptr_t)m->va <= m->size - len)
			gpa = m->gpa + (a - (uintptr_t)m->va);
	}
	pthread_rwlock_unlock(&lock);
	return gpa;
}
