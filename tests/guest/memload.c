// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * memload: the memory workload of a real Linux guest, for the planner's
 * test against a real migration (tests/integration/plan_linux.sh). Built
 * static, it runs from the guest's busybox initramfs with nothing else.
 *
 *   memload WS_MIB RATE
 *
 * Fills a working set of WS_MIB MiB (one word per page: every page
 * non-zero, so each one costs a whole page to migrate), prints
 * "memload: ready ..." on stdout, then rewrites RATE pages per second of
 * it, page after page (one word per page, a different value each pass),
 * paced in 10 ms ticks by CLOCK_MONOTONIC. A nested guest's 10 ms sleep
 * lasts longer (15-20 ms under emulation): the pages due by the clock
 * are written at each wakeup, up to 10 ticks' worth (at most one tick's
 * held the rate at 52-70% of the one asked). A guest further behind
 * (stopped by the host, slowed by dirty logging) drops the rest instead
 * of writing it in a burst, as a paced workload would. RATE 0: the
 * working set is written once, then left alone (a quiet guest). Every
 * second it prints "memload: dirtied N pages in S s, longest pause P s",
 * what it really did, since emulation may not keep the pace: P is the
 * longest time between two of its wakeups in that second (a tick, 10 ms,
 * when the guest ran; more when it did not), the time in which a
 * migration saw it write nothing. (A line a second bounds, to a second,
 * how long a guest that did not run at all, and so printed nothing, was
 * silent.)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define TICK_NS 10000000L

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long parse(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0) {
		fprintf(stderr, "memload: bad %s: %s\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	unsigned long npages, i, cur = 0, done = 0, reported = 0;
	uint64_t *mem, pass = 1;
	long ws, rate;
	double t0, last, due = 0, gap = 0;
	struct timespec tick = { 0, TICK_NS };

	if (argc != 3) {
		fprintf(stderr, "usage: memload WS_MIB RATE\n");
		return 2;
	}
	ws = parse(argv[1], "working set");
	rate = parse(argv[2], "rate");
	npages = (unsigned long)ws * 1024 * 1024 / PAGE;
	if (!npages) {
		fprintf(stderr, "memload: empty working set\n");
		return 2;
	}
	mem = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("memload: mmap");
		return 1;
	}
	/* Kept resident: no swap here, but the guest must not drop it either. */
	mlock(mem, npages * PAGE);
	for (i = 0; i < npages; i++)
		mem[i * (PAGE / 8)] = (i << 16) | pass;
	printf("memload: ready ws=%ld MiB rate=%ld pages/s\n", ws, rate);
	fflush(stdout);
	if (!rate) {
		for (;;)
			pause();
	}

	t0 = last = now();
	for (;;) {
		double t = now();
		unsigned long n;

		/* The pages due by now, but never more than 10 ticks behind. */
		if (t - last > gap)
			gap = t - last;
		due += (t - last) * rate;
		if (due > rate / 10.0 + 1)
			due = rate / 10.0 + 1;
		last = t;
		n = (unsigned long)due;
		due -= n;
		while (n--) {
			mem[cur * (PAGE / 8)] = (cur << 16) | pass;
			if (++cur == npages) {
				cur = 0;
				pass++;
			}
			done++;
		}
		if (t - t0 >= reported + 1.0) {
			reported++;
			printf("memload: dirtied %lu pages in %.1f s, longest pause %.3f s\n",
			       done, t - t0, gap);
			fflush(stdout);
			gap = 0;
		}
		nanosleep(&tick, NULL);
	}
}
