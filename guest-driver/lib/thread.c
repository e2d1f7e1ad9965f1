/* SPDX-License-Identifier: MIT */
/*
 * The library's own threads (batch.c's flusher, callback.c's host function
 * runner).
 */
#include "qc_os.h"
#include "qcrt.h"

int qc_start_thread(void *(*fn)(void *), size_t stack)
{
	return qc_os_start_thread(fn, stack);
}
