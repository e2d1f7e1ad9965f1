/* SPDX-License-Identifier: MIT */
/*
 * What drvpinned.c and rtpinned.c share, each through its own API: the
 * sizes, the fill and compare of the copied bytes, and the pinned area
 * filled to its bound and given back (to_the_bound, over the calls a
 * struct pin_api names).
 */
#ifndef QCUDA_TEST_WINDOWS_PINNED_H
#define QCUDA_TEST_WINDOWS_PINNED_H

#include <stdio.h>
#include <string.h>

#define N (4u << 20)
#define PIECE (8u << 20)
#define MAX_PIECES 4096

static int failed;

static void fill(void *p, const char *word)
{
	size_t n = strlen(word);

	for (size_t i = 0; i < N; i++)
		((char *)p)[i] = word[i % n];
}

static void same(const char *what, const void *a, const void *b)
{
	int eq = memcmp(a, b, N) == 0;

	printf("%s: %u bytes %s\n", what, N, eq ? "equal" : "DIFFER");
	failed += !eq;
}

/* One API's pinned allocation: each call answers 0 (success) or its error. */
struct pin_api {
	const char *alloc_name;
	int (*alloc)(void **p, size_t bytes);
	int (*release)(void *p);
	const char *(*error_name)(int r);
	int out_of_memory; /* what alloc answers at the bound */
};

/* Pieces until the pinned area is full, then all given back: the same
 * room is had again. Zeroing what it hands out also wipes the pinned
 * bytes of the copies from the region. */
static void to_the_bound(const struct pin_api *api)
{
	static void *p[MAX_PIECES];
	unsigned int n = 0;
	int r = 0;

	while (n < MAX_PIECES && (r = api->alloc(&p[n], PIECE)) == 0)
		n++;
	printf("%s of %u MiB pieces: %u, then %s\n", api->alloc_name, PIECE >> 20, n, api->error_name(r));
	failed += n == 0 || r != api->out_of_memory;
	while (n > 0)
		failed += api->release(p[--n]) != 0;
	while (n < MAX_PIECES && api->alloc(&p[n], PIECE) == 0)
		n++;
	printf("after freeing them all: %u again\n", n);
	while (n > 0)
		failed += api->release(p[--n]) != 0;
}

#endif
