// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Is a buffer all zero? The scan's inner loop.
 *
 * A zero page must be read whole, so the test is bound by memory
 * bandwidth once the loads are wide enough; a non-zero page almost always
 * fails in its first cache line. Each variant ORs a block of loads
 * together and branches once per block (branching per load costs more
 * than the loads), then checks the last block with overlapping loads so
 * that any length works without a byte loop.
 *
 * Variants are compiled with __attribute__((target)) and chosen at run
 * time with __builtin_cpu_supports(); the lookup asks the CPU model each
 * time (a few loads), so that nothing global is cached here. Callers in
 * loops fetch the function once.
 *
 * KVMSTATS_ZERO_QEMU follows the strategy of QEMU's buffer_is_zero()
 * (util/bufferiszero.c), for comparison: probe the first, middle and last
 * words before the vector loop, since most non-zero pages fail there.
 * Written here from that description, not from QEMU's code.
 */
#include <errno.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "internal.h"
#include "kvmstats_mem.h"

static bool zero_bytes(const unsigned char *p, size_t len)
{
	unsigned char acc = 0;

	for (size_t i = 0; i < len; i++)
		acc |= p[i];
	return !acc;
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* 64 bytes of unaligned 64-bit loads, ORed. */
static inline uint64_t or64x8(const unsigned char *p)
{
	return load64(p) | load64(p + 8) | load64(p + 16) | load64(p + 24) |
	       load64(p + 32) | load64(p + 40) | load64(p + 48) |
	       load64(p + 56);
}

/* Kept scalar on purpose (the baseline the vector variants are measured
 * against): no auto-vectorisation. The attribute is GCC's; clang does
 * not vectorise a loop with an early exit anyway. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#else
#define NO_VECTORIZE
#endif

NO_VECTORIZE
static bool zero_int(const void *buf, size_t len)
{
	const unsigned char *p = buf, *last;

	if (len < 64)
		return zero_bytes(p, len);
	last = p + len - 64;
	for (; p < last; p += 64)
		if (or64x8(p))
			return false;
	return !or64x8(last);
}

#if defined(__x86_64__)
__attribute__((target("sse2")))
static inline __m128i sse2_or4(const unsigned char *p)
{
	__m128i a = _mm_loadu_si128((const __m128i *)p);
	__m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
	__m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
	__m128i d = _mm_loadu_si128((const __m128i *)(p + 48));

	return _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
}

__attribute__((target("sse2")))
static inline bool sse2_is0(__m128i v)
{
	return _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_setzero_si128())) == 0xffff;
}

/* Blocks of 128 bytes: two groups of four 16-byte loads. */
__attribute__((target("sse2")))
static bool zero_sse2(const void *buf, size_t len)
{
	const unsigned char *p = buf, *last;

	if (len < 128)
		return zero_int(buf, len);
	last = p + len - 128;
	for (; p < last; p += 128)
		if (!sse2_is0(_mm_or_si128(sse2_or4(p), sse2_or4(p + 64))))
			return false;
	return sse2_is0(_mm_or_si128(sse2_or4(last), sse2_or4(last + 64)));
}

__attribute__((target("avx2")))
static inline __m256i avx2_or4(const unsigned char *p)
{
	__m256i a = _mm256_loadu_si256((const __m256i *)p);
	__m256i b = _mm256_loadu_si256((const __m256i *)(p + 32));
	__m256i c = _mm256_loadu_si256((const __m256i *)(p + 64));
	__m256i d = _mm256_loadu_si256((const __m256i *)(p + 96));

	return _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
}

/* Blocks of 256 bytes: two groups of four 32-byte loads. */
__attribute__((target("avx2")))
static bool zero_avx2(const void *buf, size_t len)
{
	const unsigned char *p = buf, *last;
	__m256i v;

	if (len < 256)
		return zero_sse2(buf, len);
	last = p + len - 256;
	for (; p < last; p += 256) {
		v = _mm256_or_si256(avx2_or4(p), avx2_or4(p + 128));
		if (!_mm256_testz_si256(v, v))
			return false;
	}
	v = _mm256_or_si256(avx2_or4(last), avx2_or4(last + 128));
	return _mm256_testz_si256(v, v);
}

__attribute__((target("avx512f")))
static inline __m512i avx512_or4(const unsigned char *p)
{
	__m512i a = _mm512_loadu_si512((const void *)p);
	__m512i b = _mm512_loadu_si512((const void *)(p + 64));
	__m512i c = _mm512_loadu_si512((const void *)(p + 128));
	__m512i d = _mm512_loadu_si512((const void *)(p + 192));

	return _mm512_or_si512(_mm512_or_si512(a, b), _mm512_or_si512(c, d));
}

/* Blocks of 256 bytes: four 64-byte loads. */
__attribute__((target("avx512f")))
static bool zero_avx512(const void *buf, size_t len)
{
	const unsigned char *p = buf, *last;
	__m512i v;

	if (len < 256)
		return zero_avx2(buf, len);
	last = p + len - 256;
	for (; p < last; p += 256) {
		v = avx512_or4(p);
		if (_mm512_test_epi64_mask(v, v))
			return false;
	}
	v = avx512_or4(last);
	return !_mm512_test_epi64_mask(v, v);
}

#else
/* Other architectures have the integer loop only; cpu_has() never
 * offers the x86 variants there. */
#define zero_sse2 zero_int
#define zero_avx2 zero_int
#define zero_avx512 zero_int
#endif /* __x86_64__ */

static bool cpu_has(enum kvmstats_zero_impl impl)
{
#if !defined(__x86_64__)
	return impl != KVMSTATS_ZERO_SSE2 && impl != KVMSTATS_ZERO_AVX2 &&
	       impl != KVMSTATS_ZERO_AVX512;
#else
	__builtin_cpu_init();
	switch (impl) {
	case KVMSTATS_ZERO_SSE2:
		return __builtin_cpu_supports("sse2");
	case KVMSTATS_ZERO_AVX2:
		return __builtin_cpu_supports("avx2");
	case KVMSTATS_ZERO_AVX512:
		return __builtin_cpu_supports("avx512f");
	default:
		return true;
	}
#endif
}

static enum kvmstats_zero_impl best_impl(void)
{
	if (cpu_has(KVMSTATS_ZERO_AVX512))
		return KVMSTATS_ZERO_AVX512;
	if (cpu_has(KVMSTATS_ZERO_AVX2))
		return KVMSTATS_ZERO_AVX2;
	if (cpu_has(KVMSTATS_ZERO_SSE2))
		return KVMSTATS_ZERO_SSE2;
	return KVMSTATS_ZERO_INT;
}

static kvmstats_zero_fn impl_fn(enum kvmstats_zero_impl impl)
{
	switch (impl) {
	case KVMSTATS_ZERO_SSE2:
		return zero_sse2;
	case KVMSTATS_ZERO_AVX2:
		return zero_avx2;
	case KVMSTATS_ZERO_AVX512:
		return zero_avx512;
	default:
		return zero_int;
	}
}

/* QEMU's order of work: three probes, then the widest loop the CPU has.
 * The probes cost three loads on a zero page and end most tests of
 * non-zero pages at once. */
static bool zero_qemu(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	if (len < 64)
		return zero_bytes(p, len);
	if (load64(p) | load64(p + len / 2 - 8) | load64(p + len - 8))
		return false;
	return impl_fn(best_impl())(buf, len);
}

kvmstats_zero_fn kvmstats_zero__get(enum kvmstats_zero_impl impl)
{
	if (impl >= KVMSTATS_ZERO_NR) {
		errno = EINVAL;
		return NULL;
	}
	if (impl == KVMSTATS_ZERO_BEST)
		impl = best_impl();
	if (impl == KVMSTATS_ZERO_QEMU)
		return zero_qemu;
	if (!cpu_has(impl)) {
		errno = ENOTSUP;
		return NULL;
	}
	return impl_fn(impl);
}

const char *kvmstats_zero__name(enum kvmstats_zero_impl impl)
{
	static const char *const names[] = {
		[KVMSTATS_ZERO_INT] = "int",	   [KVMSTATS_ZERO_SSE2] = "sse2",
		[KVMSTATS_ZERO_AVX2] = "avx2",	   [KVMSTATS_ZERO_AVX512] = "avx512",
		[KVMSTATS_ZERO_QEMU] = "qemu",
	};

	if (impl == KVMSTATS_ZERO_BEST)
		impl = best_impl();
	if (impl >= KVMSTATS_ZERO_NR)
		return "unknown";
	return names[impl];
}

bool kvmstats_is_zero(const void *buf, size_t len)
{
	return impl_fn(best_impl())(buf, len);
}
