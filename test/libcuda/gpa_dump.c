/* SPDX-License-Identifier: MIT */
/*
 * gpa_dump LIBCUDA < requests: for each "name ver=N flags=F" line, what
 * LIBCUDA's cuGetProcAddress_v2 answers, as "name N F -> symbol" (the
 * exported name dladdr gives for the pointer) or "-> NOT_FOUND status".
 * Run against NVIDIA's libcuda.so.1 and qcuda's, the two outputs must be
 * the same (test/gpu/run.sh); qcuda's alone is checked in CI.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*init_fn)(unsigned int);

int main(int argc, char **argv)
{
	char line[512], name[256];
	void *lib;
	gpa_fn gpa;
	init_fn init;

	if (argc != 2) {
		fprintf(stderr, "usage: gpa_dump LIBCUDA < requests\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "gpa_dump: %s\n", dlerror());
		return 1;
	}
	gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
	init = (init_fn)dlsym(lib, "cuInit");
	if (!gpa || !init) {
		fprintf(stderr, "gpa_dump: no cuGetProcAddress_v2 / cuInit in %s\n", argv[1]);
		return 1;
	}
	init(0); /* may fail (no device): cuGetProcAddress does not need it */
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long flags;
		int ver, status = -1, r;
		void *fn = NULL;
		Dl_info info;

		if (sscanf(line, "%255s ver=%d flags=%llu", name, &ver, &flags) != 3)
			continue; /* the empty-name request and blank lines */
		r = gpa(name, &fn, ver, flags, &status);
		if (r || !fn) {
			printf("%s %d %llu -> NOT_FOUND %d (result %d)\n", name, ver, flags, status, r);
			continue;
		}
		if (dladdr(fn, &info) && info.dli_sname && info.dli_saddr == fn)
			printf("%s %d %llu -> %s\n", name, ver, flags, info.dli_sname);
		else
			printf("%s %d %llu -> (unnamed)\n", name, ver, flags);
	}
	return 0;
}
