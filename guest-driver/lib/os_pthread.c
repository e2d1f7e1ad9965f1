/* SPDX-License-Identifier: MIT */
/*
 * The thread start both systems share: glibc's threads and mingw's
 * winpthreads take the same calls. os_posix_rt.c wraps it with the
 * program's signals blocked; os_win32_rt.c takes it as it is.
 */
#include <pthread.h>

#include "qc_os.h"

int qc_os_start_detached(void *(*fn)(void *), size_t stack)
{
	pthread_attr_t attr;
	pthread_t t;
	int err;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (stack)
		pthread_attr_setstacksize(&attr, stack);
	err = pthread_create(&t, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	return err;
}
