/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Clocks shared by the benchmarks. */
#ifndef KVMSTATS_BENCH_H
#define KVMSTATS_BENCH_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wall time (monotonic) and this process's CPU time, in ns. */
static inline uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t cpu_ns(void)
{
	return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

#endif
