// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * libFuzzer harness for the QMP client's estimate of what a reply costs
 * json-c (lib/qmp.c, ks_qmp_estimate()). The client refuses a reply
 * whose estimate passes the caller's budget before json-c builds it, so
 * a monitor that can make json-c take more than the estimate can make
 * kvmstats take more than its budget: the estimate must never be less
 * than what json-c takes, at its peak, counted in glibc's chunks (but
 * for rounding: ROUNDING).
 *
 * The input is a reply as a monitor sends it, parsed as the client
 * parses (ks_qmp_tokener()). Under ASan every allocation is counted
 * through the allocator's hooks; without it (make check's replay) what
 * json-c holds once done is read from mallinfo2().
 * Run by tests/integration/fuzz.sh for a bounded time.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "qmp.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COUNT_HOOKS 1
#endif
#endif
#ifdef __SANITIZE_ADDRESS__
#define COUNT_HOOKS 1
#endif

/* Room for what the model rounds (a sixteenth, and 1 KiB): the misses
 * this harness found were 15% to 50 times over. */
#define ROUNDING 16

#ifdef COUNT_HOOKS
#include <sanitizer/allocator_interface.h>

/* The chunk glibc gives a request of @n bytes on x86-64. */
static size_t chunk(size_t n)
{
	if (n >= 128 * 1024)
		return (n + 16 + 4095) & ~(size_t)4095;	/* mmap()ed */
	n = (n + 8 + 15) & ~(size_t)15;
	return n < 32 ? 32 : n;
}

static int counting;
static size_t now, peak;

static void on_malloc(const volatile void *p, size_t n)
{
	(void)p;
	if (!counting)
		return;
	now += chunk(n);
	if (now > peak)
		peak = now;
}

/* (A block allocated before the count and freed in it, the token
 * buffer's first 32 bytes, counts against the peak's later growth.) */
static void on_free(const volatile void *p)
{
	if (counting && p)
		now -= chunk(__sanitizer_get_allocated_size((const void *)p));
}

static void count_start(void)
{
	static int hooked;

	if (!hooked)
		hooked = __sanitizer_install_malloc_and_free_hooks(on_malloc,
								   on_free);
	now = peak = 0;
	counting = 1;
}

static size_t count_end(void)
{
	counting = 0;
	return peak;
}
#else
static size_t before;

static size_t held(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks + m.hblkhd;
}

static void count_start(void)
{
	before = held();
}

static size_t count_end(void)
{
	size_t after = held();

	return after > before ? after - before : 0;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_tokener *tok = ks_qmp_tokener();
	struct json_object *o;
	size_t cost, took, used;

	if (!tok || size > INT32_MAX)
		goto out;
	count_start();
	o = json_tokener_parse_ex(tok, (const char *)data, (int)size);
	took = count_end();
	/* The bytes json-c took: one message, or the start of one. */
	used = json_tokener_get_parse_end(tok);
	if (used > size)
		used = size;
	/* A message nested too deep is refused before json-c sees it. */
	if (!ks_qmp_estimate((const char *)data, used, SIZE_MAX, &cost) &&
	    took > cost + cost / ROUNDING + 1024)
		abort();
	json_object_put(o);
out:
	json_tokener_free(tok);
	return 0;
}
