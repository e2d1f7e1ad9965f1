/* SPDX-License-Identifier: MIT */
/*
 * The library's own threads (batch.c's flusher, callback.c's host function
 * runner).
 */
#include <pthread.h>
#include <signal.h>

#include "qcrt.h"

int qc_start_thread(void *(*fn)(void *), size_t stack)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (stack)
		pthread_attr_setstacksize(&attr, stack);
	err = pthread_create(&t, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}
