/* SPDX-License-Identifier: MIT */
/*
 * The real libcuda.so.1, loaded RTLD_LOCAL from the shim's constructor (so
 * that its names do not take the shim's place): QCUDA_TRACE_REAL, else
 * NVIDIA's usual places, else the first libcuda.so.1 that /etc/ld.so.cache
 * names and that is not this file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "trace.h"

static void *real_lib;
static void *real_base;
static char real_path[4096] = "(none)";

static const char *const KNOWN[] = { "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1" };

/* Whether path is this shim (same file), which must not load itself. */
static int is_self(const char *path)
{
	Dl_info me;
	struct stat a, b;

	if (!dladdr((void *)is_self, &me) || !me.dli_fname)
		return 0;
	return stat(path, &a) == 0 && stat(me.dli_fname, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int try_load(const char *path)
{
	void *h, *init;
	Dl_info info;

	if (access(path, R_OK) != 0 || is_self(path))
		return 0;
	h = dlopen(path, RTLD_LOCAL | RTLD_NOW);
	if (!h) {
		fprintf(stderr, "qcuda-trace: cannot load %s: %s\n", path, dlerror());
		return 0;
	}
	real_lib = h;
	snprintf(real_path, sizeof(real_path), "%s", path);
	init = dlsym(h, "cuInit");
	if (init && dladdr(init, &info))
		real_base = info.dli_fbase;
	return 1;
}

/*
 * The cache's string table holds the full path of every library it knows;
 * those ending in /libcuda.so.1 are the candidates, in the cache's order.
 */
static int load_from_cache(void)
{
	static const char tail[] = "/libcuda.so.1";
	struct stat st;
	const char *c, *end;
	int fd, ok = 0;

	fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		c = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (c != MAP_FAILED) {
			end = c + st.st_size;
			for (const char *s = c; s < end && !ok;) {
				size_t n = strnlen(s, (size_t)(end - s));
				if (*s == '/' && n > sizeof(tail) && n < 4096 &&
				    memcmp(s + n - (sizeof(tail) - 1), tail, sizeof(tail) - 1) == 0) {
					char path[4096];
					memcpy(path, s, n);
					path[n] = 0;
					ok = try_load(path);
				}
				s += n + 1;
			}
			munmap((void *)c, (size_t)st.st_size);
		}
	}
	close(fd);
	return ok;
}

__attribute__((constructor(102))) static void real_init(void)
{
	const char *want = getenv("QCUDA_TRACE_REAL");

	if (want && *want) {
		if (!try_load(want))
			fprintf(stderr, "qcuda-trace: QCUDA_TRACE_REAL=%s cannot be loaded: every call fails\n", want);
		return;
	}
	for (size_t i = 0; i < sizeof(KNOWN) / sizeof(KNOWN[0]); i++)
		if (try_load(KNOWN[i]))
			return;
	if (!load_from_cache())
		fprintf(stderr, "qcuda-trace: no real libcuda.so.1 found (set QCUDA_TRACE_REAL): every call fails\n");
}

const char *tr_real_path(void)
{
	return real_path;
}

void *tr_real_sym(const char *name)
{
	return real_lib ? dlsym(real_lib, name) : NULL;
}

void *tr_real(struct tr_fn *f)
{
	if (!__atomic_load_n(&f->resolved, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&f->real, tr_real_sym(f->name), __ATOMIC_RELAXED);
		__atomic_store_n(&f->resolved, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&f->real, __ATOMIC_RELAXED);
}

CUresult tr_missing(struct tr_fn *f)
{
	struct tr_rec r;

	tr_begin(&r, "m", f->name);
	tr_put(&r, " -> %s", tr_errname(CUDA_ERROR_NOT_FOUND));
	tr_end(&r);
	return CUDA_ERROR_NOT_FOUND;
}

/* Whether p is in the real library's mapping (a function of its text). */
int tr_in_real(const void *p)
{
	Dl_info info;

	return real_base && p && dladdr(p, &info) && info.dli_fbase == real_base;
}

static int by_name(const void *key, const void *elem)
{
	return strcmp(key, ((const struct tr_wrapper *)elem)->name);
}

void *tr_wrapper(const char *name)
{
	const struct tr_wrapper *w = bsearch(name, tr_wrappers, tr_nwrappers, sizeof(tr_wrappers[0]), by_name);

	return w ? w->fn : NULL;
}
