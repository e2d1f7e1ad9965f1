/* SPDX-License-Identifier: MIT */
/*
 * Messages on stderr: qc_msg always, qc_debug when QCUDA_DEBUG is set.
 */
#include <stdarg.h>
#include <stdio.h>

#include "qcrt.h"

int qc_debug_on;

void qc_msg(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "qcuda: %s\n", buf);
}

void qc_debug(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!qc_debug_on)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "qcuda[debug]: %s\n", buf);
}
