/* SPDX-License-Identifier: MIT */
/*
 * cuGetExportTable: the real table, copied, each function slot replaced by a
 * trampoline that logs the call and calls the real slot. Trampolines are
 * static functions made by macro, one per (table, slot): XT_TABLES x
 * XT_SLOTS. Each takes and forwards six integer arguments (x86-64 SysV:
 * rdi, rsi, rdx, rcx, r8, r9) and returns rax: arguments on the stack and
 * in floating-point registers are not carried (no slot seen takes any).
 *
 * A table's length: slot 0 is its size in bytes for most tables (a multiple
 * of 8 below 4096; slot 0 then stays as it is); otherwise (the context
 * local storage table has no size) slots are taken while they point into
 * the real library, at most XT_SLOTS. A table is wrapped once (by UUID).
 *
 * Two tables are handed over unwrapped (logged "passthrough"): cudart's
 * integrity check hashes the addresses of the cudart interface table
 * (6bd5fb6c), of the integrity table (d4082055) and of its check function,
 * as the program sees them, against the real library's: a copy of either
 * fails it (cudaErrorSoftwareValidityNotEstablished, measured under qcuda's
 * libcuda). QCUDA_TRACE_PASSTHROUGH=TAG,... replaces that list ("" wraps
 * every table).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "trace.h"

#define XT_TABLES 32
#define XT_SLOTS 256
#define XT_DUMP 16

struct xt_table {
	CUuuid id;
	char tag[9]; /* the UUID's first 4 bytes in hex */
	const uintptr_t *real;
	uintptr_t *wrapped;
	unsigned int n;
	int sized;
};

static struct xt_table tables[XT_TABLES];
static unsigned int ntables;
static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;

typedef uintptr_t (*xt_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);

/* An argument or result: an address if it is readable, else its value. */
static void xt_value(struct tr_rec *r, uintptr_t v)
{
	if (tr_readable(v))
		tr_put(r, "@0x%lx", (unsigned long)v);
	else if (v < 1u << 20)
		tr_put(r, "%lu", (unsigned long)v);
	else
		tr_put(r, "0x%lx", (unsigned long)v);
}

static uintptr_t xt_call(unsigned int t, unsigned int s, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,
			 uintptr_t a4, uintptr_t a5)
{
	const struct xt_table *x = &tables[t];
	xt_fn fn = (xt_fn)x->real[s];
	uintptr_t a[6] = { a0, a1, a2, a3, a4, a5 }, ret;
	unsigned char b[XT_DUMP];
	struct tr_rec r;

	if (tr_nested())
		return fn(a0, a1, a2, a3, a4, a5);
	tr_begin(&r, "x", x->tag);
	tr_put(&r, "[%u]", s);
	for (int i = 0; i < 6; i++) {
		tr_put(&r, " a%d=", i);
		xt_value(&r, a[i]);
	}
	tr_enter(&r);
	ret = fn(a0, a1, a2, a3, a4, a5);
	tr_depth(-1);
	tr_put(&r, " -> ");
	xt_value(&r, ret);
	for (int i = 0; i < 6; i++) {
		if (a[i] < 4096)
			continue;
		size_t n = tr_peek((const void *)a[i], b, sizeof(b));
		if (n == 0)
			continue;
		tr_put(&r, " *a%d=", i);
		tr_words(&r, b, n, sizeof(b));
	}
	tr_end(&r);
	return ret;
}

/* The trampolines: xt_T_SS for table T (decimal) and slot 0xSS. */
/* Not clang-formatted: it does not settle on one layout for these. */
// clang-format off
#define XT_FN(t, s) \
	static uintptr_t xt_##t##_##s(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4, uintptr_t a5) \
	{ \
		return xt_call(t, 0x##s, a0, a1, a2, a3, a4, a5); \
	}
#define XT_PTR(t, s) (void *)xt_##t##_##s,
#define XT_16(m, t, h) \
	m(t, h##0) m(t, h##1) m(t, h##2) m(t, h##3) m(t, h##4) m(t, h##5) m(t, h##6) m(t, h##7) \
	m(t, h##8) m(t, h##9) m(t, h##a) m(t, h##b) m(t, h##c) m(t, h##d) m(t, h##e) m(t, h##f)
#define XT_256(m, t) \
	XT_16(m, t, 0) XT_16(m, t, 1) XT_16(m, t, 2) XT_16(m, t, 3) XT_16(m, t, 4) XT_16(m, t, 5) \
	XT_16(m, t, 6) XT_16(m, t, 7) XT_16(m, t, 8) XT_16(m, t, 9) XT_16(m, t, a) XT_16(m, t, b) \
	XT_16(m, t, c) XT_16(m, t, d) XT_16(m, t, e) XT_16(m, t, f)
#define XT_ALL(m) \
	XT_256(m, 0) XT_256(m, 1) XT_256(m, 2) XT_256(m, 3) XT_256(m, 4) XT_256(m, 5) XT_256(m, 6) XT_256(m, 7) \
	XT_256(m, 8) XT_256(m, 9) XT_256(m, 10) XT_256(m, 11) XT_256(m, 12) XT_256(m, 13) XT_256(m, 14) XT_256(m, 15) \
	XT_256(m, 16) XT_256(m, 17) XT_256(m, 18) XT_256(m, 19) XT_256(m, 20) XT_256(m, 21) XT_256(m, 22) XT_256(m, 23) \
	XT_256(m, 24) XT_256(m, 25) XT_256(m, 26) XT_256(m, 27) XT_256(m, 28) XT_256(m, 29) XT_256(m, 30) XT_256(m, 31)
#define XT_ROW(t) { XT_256(XT_PTR, t) },

XT_ALL(XT_FN)

static void *const trampolines[XT_TABLES][XT_SLOTS] = {
	XT_ROW(0) XT_ROW(1) XT_ROW(2) XT_ROW(3) XT_ROW(4) XT_ROW(5) XT_ROW(6) XT_ROW(7)
	XT_ROW(8) XT_ROW(9) XT_ROW(10) XT_ROW(11) XT_ROW(12) XT_ROW(13) XT_ROW(14) XT_ROW(15)
	XT_ROW(16) XT_ROW(17) XT_ROW(18) XT_ROW(19) XT_ROW(20) XT_ROW(21) XT_ROW(22) XT_ROW(23)
	XT_ROW(24) XT_ROW(25) XT_ROW(26) XT_ROW(27) XT_ROW(28) XT_ROW(29) XT_ROW(30) XT_ROW(31)
};
// clang-format on

/* How many slots the table has, and whether slot 0 is its size. */
static unsigned int table_length(const uintptr_t *real, int *sized)
{
	uintptr_t slot;
	unsigned int n = 0;

	if (tr_peek(real, &slot, sizeof(slot)) != sizeof(slot))
		return 0;
	*sized = slot >= 16 && slot < 4096 && slot % 8 == 0;
	if (*sized)
		return slot / 8 < XT_SLOTS ? (unsigned int)(slot / 8) : XT_SLOTS;
	while (n < XT_SLOTS && tr_peek(real + n, &slot, sizeof(slot)) == sizeof(slot) && tr_in_real((void *)slot))
		n++;
	return n;
}

/* The wrapped copy of a real table (made once per UUID); NULL if there is no room. */
static struct xt_table *wrap(const CUuuid *id, const uintptr_t *real)
{
	struct xt_table *x = NULL;
	unsigned int t;

	pthread_mutex_lock(&tables_lock);
	for (t = 0; t < ntables; t++)
		if (memcmp(&tables[t].id, id, sizeof(*id)) == 0 && tables[t].real == real) {
			x = &tables[t];
			goto out;
		}
	if (ntables == XT_TABLES)
		goto out;
	x = &tables[t];
	x->id = *id;
	for (int i = 0; i < 4; i++)
		x->tag[2 * i] = "0123456789abcdef"[(unsigned char)id->bytes[i] >> 4],
			   x -> tag[2 * i + 1] = "0123456789abcdef"[(unsigned char)id->bytes[i] & 15];
	x->real = real;
	x->n = table_length(real, &x->sized);
	x->wrapped = calloc(x->n ? x->n : 1, sizeof(uintptr_t));
	if (!x->wrapped) {
		x = NULL;
		goto out;
	}
	for (unsigned int s = 0; s < x->n; s++) {
		uintptr_t slot = real[s];
		x->wrapped[s] = (s == 0 && x->sized) || !tr_in_real((void *)slot) ? slot : (uintptr_t)trampolines[t][s];
	}
	__atomic_store_n(&ntables, t + 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&tables_lock);
	return x;
}

/* Whether tag is one of a comma-separated list. */
static int listed(const char *list, const char *tag)
{
	size_t n = strlen(tag);

	for (const char *p = strstr(list, tag); p; p = strstr(p + 1, tag))
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
			return 1;
	return 0;
}

static int passthrough(const char *tag)
{
	const char *list = getenv("QCUDA_TRACE_PASSTHROUGH");

	return listed(list ? list : "6bd5fb6c,d4082055", tag);
}

/*
 * QCUDA_TRACE_REFUSE=TAG,...: tables answered CUDA_ERROR_INVALID_VALUE, as a
 * driver without them answers. Run natively, it shows whether a library's
 * choice (a kernel, a path) depends on a table qcuda does not serve.
 */
static int refused(const CUuuid *id)
{
	const char *list = getenv("QCUDA_TRACE_REFUSE");
	unsigned char b[4];
	char tag[9];

	if (!list || !id || tr_peek(id, b, sizeof(b)) != sizeof(b))
		return 0;
	for (int i = 0; i < 4; i++) {
		tag[2 * i] = "0123456789abcdef"[b[i] >> 4];
		tag[2 * i + 1] = "0123456789abcdef"[b[i] & 15];
	}
	tag[8] = 0;
	return listed(list, tag);
}

static void uuid(struct tr_rec *r, const CUuuid *id)
{
	unsigned char b[16];

	tr_put(r, " id=");
	if (!id || tr_peek(id, b, sizeof(b)) != sizeof(b)) {
		tr_put(r, "?");
		return;
	}
	for (int i = 0; i < 16; i++)
		tr_put(r, "%02x%s", b[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
}

TR_EXPORT CUresult tw_cuGetExportTable(const void **ppExportTable,
				       const CUuuid *pExportTableId) __asm__("cuGetExportTable");
TR_EXPORT CUresult tw_cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static struct tr_fn f = { "cuGetExportTable" };
	__typeof__(tw_cuGetExportTable) *real = tr_real(&f);
	struct xt_table *x;
	struct tr_rec r;
	CUresult res;

	if (!real)
		return tr_missing(&f);
	if (tr_nested())
		return real(ppExportTable, pExportTableId);
	tr_begin(&r, "t", f.name);
	uuid(&r, pExportTableId);
	tr_enter(&r);
	if (refused(pExportTableId)) {
		tr_put(&r, " refused");
		res = CUDA_ERROR_INVALID_VALUE;
	} else {
		res = real(ppExportTable, pExportTableId);
	}
	tr_result(&r, res);
	if (res == CUDA_SUCCESS && ppExportTable && *ppExportTable) {
		x = wrap(pExportTableId, *ppExportTable);
		if (x) {
			tr_put(&r, " len=%u sized=%d tag=%s", x->n, x->sized, x->tag);
			if (passthrough(x->tag))
				tr_put(&r, " passthrough");
			else
				*ppExportTable = x->wrapped;
		} else {
			tr_put(&r, " unwrapped");
		}
	}
	tr_end(&r);
	return res;
}
