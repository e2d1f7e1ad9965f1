/* SPDX-License-Identifier: MIT */
/*
 * A record is one line: "KIND T<tid> NAME in=... -> RESULT out=...". Values
 * have no spaces: integers in decimal, addresses as @0x... (the diff drops
 * the number), NULL, strings quoted with \xHH escapes, structs as {words}
 * of 64 bits (a word that is a readable address as @0x...), '?' for what
 * could not be read.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "trace.h"

#define STR_MAX 200
#define BYTES_MAX 256
#define ARR_MAX 16

/* __builtin_classify_type's classes (GCC's typeclass.h). */
enum { CLS_INTEGER = 1, CLS_CHAR = 2, CLS_ENUM = 3, CLS_BOOL = 4, CLS_POINTER = 5, CLS_REAL = 8 };

static __thread int depth;

int tr_nested(void)
{
	return depth > 0;
}

void tr_depth(int delta)
{
	depth += delta;
}

void tr_put(struct tr_rec *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->len >= TR_LINE_MAX - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(r->buf + r->len, TR_LINE_MAX - 1 - r->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		r->len += (size_t)n < TR_LINE_MAX - 1 - r->len ? (size_t)n : TR_LINE_MAX - 2 - r->len;
}

void tr_begin(struct tr_rec *r, const char *kind, const char *name)
{
	r->len = 0;
	tr_put(r, "%s T%ld %s", kind, tr_tid(), name);
}

/* The line so far, marked as a call under way, when QCUDA_TRACE_ENTER asks. */
void tr_enter(struct tr_rec *r)
{
	depth++;
	if (tr_enter_lines()) {
		char line[TR_LINE_MAX + 2];
		size_t n = r->len;

		line[0] = '>';
		line[1] = ' ';
		memcpy(line + 2, r->buf, n);
		line[n + 2] = '\n';
		tr_write(line, n + 3);
	}
}

const char *tr_errname(int code)
{
	for (unsigned int i = 0; i < tr_nerrnames; i++)
		if (tr_errnames[i].code == code)
			return tr_errnames[i].name;
	return NULL;
}

void tr_result(struct tr_rec *r, CUresult res)
{
	const char *name = tr_errname((int)res);

	depth--;
	if (name)
		tr_put(r, " -> %s", name);
	else
		tr_put(r, " -> CUresult(%d)", (int)res);
}

void tr_end(struct tr_rec *r)
{
	r->buf[r->len++] = '\n';
	tr_write(r->buf, r->len);
}

static long long as_signed(const unsigned char *b, size_t size)
{
	switch (size) {
	case 1:
		return *(const signed char *)b;
	case 2:
		return *(const short *)b;
	case 4:
		return *(const int *)b;
	default:
		return *(const long long *)b;
	}
}

static unsigned long long as_unsigned(const unsigned char *b, size_t size)
{
	unsigned long long v = 0;

	memcpy(&v, b, size < sizeof(v) ? size : sizeof(v));
	return v;
}

void tr_word(struct tr_rec *r, uintptr_t v)
{
	if (v == 0)
		tr_put(r, "NULL");
	else
		tr_put(r, "@0x%lx", (unsigned long)v);
}

/* A struct's bytes as 64-bit words; of size bytes, n were read. */
void tr_words(struct tr_rec *r, const unsigned char *b, size_t n, size_t size)
{
	tr_put(r, "{");
	for (size_t i = 0; i < n; i += 8) {
		size_t k = n - i < 8 ? n - i : 8;
		unsigned long long w = as_unsigned(b + i, k);

		if (i)
			tr_put(r, ",");
		if (k == 8 && tr_readable((uintptr_t)w))
			tr_put(r, "@0x%llx", w);
		else
			tr_put(r, "0x%llx", w);
	}
	tr_put(r, "}");
	if (n < size)
		tr_put(r, "/%zu", size);
}

/* A value of size bytes at b, of class cls. */
static void value(struct tr_rec *r, int cls, int sgn, const unsigned char *b, size_t size)
{
	switch (cls) {
	case CLS_INTEGER:
	case CLS_CHAR:
	case CLS_ENUM:
	case CLS_BOOL:
		if (size > 8)
			break;
		if (sgn)
			tr_put(r, "%lld", as_signed(b, size));
		else
			tr_put(r, "%llu", as_unsigned(b, size));
		return;
	case CLS_POINTER:
		tr_word(r, (uintptr_t)as_unsigned(b, size));
		return;
	case CLS_REAL:
		if (size == sizeof(float)) {
			float f;
			memcpy(&f, b, sizeof(f));
			tr_put(r, "%.9g", f);
			return;
		}
		if (size == sizeof(double)) {
			double d;
			memcpy(&d, b, sizeof(d));
			tr_put(r, "%.17g", d);
			return;
		}
		break;
	}
	tr_words(r, b, size < BYTES_MAX ? size : BYTES_MAX, size);
}

void tr_val(struct tr_rec *r, const char *name, int cls, int sgn, const void *p, size_t size)
{
	tr_put(r, " %s=", name);
	value(r, cls, sgn, p, size);
}

void tr_addr(struct tr_rec *r, const char *name, uintptr_t v)
{
	tr_put(r, " %s=", name);
	tr_word(r, v);
}

static void quoted(struct tr_rec *r, const char *s)
{
	char buf[STR_MAX + 1];
	size_t n = tr_peek(s, buf, sizeof(buf)), len = strnlen(buf, n);

	if (n == 0) {
		tr_put(r, "?");
		return;
	}
	tr_put(r, "\"");
	for (size_t i = 0; i < len && i < STR_MAX; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c > ' ' && c < 0x7f && c != '"' && c != '\\')
			tr_put(r, "%c", c);
		else
			tr_put(r, "\\x%02x", c);
	}
	tr_put(r, len > STR_MAX ? "\"+" : (len == n ? "\"?" : "\""));
}

/* A string argument's value: NULL or the string, quoted. */
static void str_value(struct tr_rec *r, const char *s)
{
	if (!s)
		tr_put(r, "NULL");
	else
		quoted(r, s);
}

void tr_str(struct tr_rec *r, const char *name, const char *s)
{
	tr_put(r, " %s=", name);
	str_value(r, s);
}

/* What p points to: an input (a struct, before the call) or an output (after). */
void tr_pointee(struct tr_rec *r, const char *name, int cls, int sgn, const void *p, size_t size, int out)
{
	unsigned char b[BYTES_MAX];
	size_t want = size < BYTES_MAX ? size : BYTES_MAX, n;

	if (!out && cls != 12 && cls != 13) {
		tr_addr(r, name, (uintptr_t)p);
		return;
	}
	tr_put(r, " %s%s=", out ? "*" : "", name);
	if (!p) {
		tr_put(r, "NULL");
		return;
	}
	n = tr_peek(p, b, want);
	if (n < want && (cls != 12 && cls != 13))
		tr_put(r, "?");
	else if (n == 0)
		tr_put(r, "?");
	else if (n < want)
		tr_words(r, b, n, size);
	else
		value(r, cls, sgn, b, size);
}

void tr_out_addr(struct tr_rec *r, const char *name, const void *p, size_t size)
{
	unsigned long long v = 0;

	tr_put(r, " *%s=", name);
	if (!p)
		tr_put(r, "NULL");
	else if (size > sizeof(v) || tr_peek(p, &v, size) != size)
		tr_put(r, "?");
	else
		tr_word(r, (uintptr_t)v);
}

void tr_out_str(struct tr_rec *r, const char *name, const char *s)
{
	tr_put(r, " *%s=", name);
	str_value(r, s);
}

void tr_out_strp(struct tr_rec *r, const char *name, const void *pp)
{
	const char *s = NULL;

	tr_put(r, " *%s=", name);
	if (!pp)
		tr_put(r, "NULL");
	else if (tr_peek(pp, &s, sizeof(s)) != sizeof(s))
		tr_put(r, "?");
	else
		str_value(r, s);
}

/* n integers of size bytes at p (a length another parameter gives). */
void tr_arr(struct tr_rec *r, const char *name, const void *p, size_t size, int sgn, long long n)
{
	unsigned char b[ARR_MAX * 8];
	size_t k = n < 0 ? 0 : n > ARR_MAX ? ARR_MAX : (size_t)n, got;

	tr_put(r, " %s=", name);
	if (!p) {
		tr_put(r, "NULL");
		return;
	}
	if (size > 8)
		size = 8;
	got = tr_peek(p, b, k * size);
	tr_put(r, "[");
	for (size_t i = 0; i < k; i++) {
		if (i)
			tr_put(r, ",");
		if ((i + 1) * size > got)
			tr_put(r, "?");
		else if (sgn)
			tr_put(r, "%lld", as_signed(b + i * size, size));
		else
			tr_put(r, "%llu", as_unsigned(b + i * size, size));
	}
	tr_put(r, "]");
	if ((long long)k < n)
		tr_put(r, "/%lld", n);
}

/* cuLaunchKernelEx's and the cluster occupancy calls' config, with its attributes. */
void tr_launch_config(struct tr_rec *r, const char *name, const CUlaunchConfig *cfg)
{
	CUlaunchConfig c;
	CUlaunchAttribute a;

	tr_put(r, " %s=", name);
	if (!cfg) {
		tr_put(r, "NULL");
		return;
	}
	if (tr_peek(cfg, &c, sizeof(c)) != sizeof(c)) {
		tr_put(r, "?");
		return;
	}
	tr_put(r, "{grid=%u,%u,%u,block=%u,%u,%u,smem=%u,stream=", c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX,
	       c.blockDimY, c.blockDimZ, c.sharedMemBytes);
	tr_word(r, (uintptr_t)c.hStream);
	tr_put(r, ",attrs=[");
	for (unsigned int i = 0; i < c.numAttrs && i < ARR_MAX; i++) {
		if (i)
			tr_put(r, ";");
		if (tr_peek(c.attrs + i, &a, sizeof(a)) != sizeof(a)) {
			tr_put(r, "?");
			continue;
		}
		tr_put(r, "%d:", (int)a.id);
		tr_words(r, (const unsigned char *)&a.value, sizeof(a.value), sizeof(a.value));
	}
	tr_put(r, "]%s}", c.numAttrs > ARR_MAX ? "+" : "");
}
