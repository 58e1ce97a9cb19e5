/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvmstats, memory side: where a VMM keeps its guest's RAM, how much of
 * it is zero, how fast the guest dirties it, and what a live migration of
 * it would cost. Everything here only reads: guest memory is never
 * written, a page that is not present is never faulted in, the VMM is
 * never stopped.
 *
 *   kvmstats_ram      the guest RAM regions in the VMM's address space
 *                     (QEMU's RAM blocks over QMP, a heuristic otherwise,
 *                     or the caller's ranges), with why each was chosen;
 *   kvmstats_pages    those regions classified from the VMM's page tables
 *                     (PAGEMAP_SCAN, or /proc/PID/pagemap entries);
 *   estimators        stats / pagemap / sample / scan: zero pages with
 *                     error bars, cost and coverage;
 *   kvmstats_dirty    dirty rate by hashing a sample of pages over time;
 *   kvmstats_migrate  QEMU's pre-copy model: bytes, iterations, time;
 *   kvmstats_plan     all of the above for one VM, for `kvmstats plan`
 *                     and the exporter.
 *
 * Same conventions as kvmstats.h: 0/-errno, NULL+errno, *_opts with sz,
 * no printing, no global state; one object used by one thread at a time.
 */
#ifndef KVMSTATS_MEM_H
#define KVMSTATS_MEM_H

#include "kvmstats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The unit every count below is in: QEMU's target page on x86. */
#define KVMSTATS_PAGE_SIZE 4096u

/* ---------------------------------------------------------------------
 * Zero test. Every variant answers "is every byte of buf zero?" for any
 * length; they differ only in speed. Dispatch is at run time (the CPU's
 * features are read at each lookup: nothing is cached globally).
 */
enum kvmstats_zero_impl {
	KVMSTATS_ZERO_BEST,	/* the fastest this CPU supports */
	KVMSTATS_ZERO_INT,	/* portable 64-bit integer loop */
	KVMSTATS_ZERO_SSE2,
	KVMSTATS_ZERO_AVX2,
	KVMSTATS_ZERO_AVX512,	/* AVX-512F */
	KVMSTATS_ZERO_QEMU,	/* QEMU buffer_is_zero()'s strategy, ours */
	KVMSTATS_ZERO_NR,
};

typedef bool (*kvmstats_zero_fn)(const void *buf, size_t len);

/* The function of @impl, or NULL (errno ENOTSUP) when the CPU cannot run
 * it. */
KVMSTATS_API kvmstats_zero_fn kvmstats_zero__get(enum kvmstats_zero_impl impl);
/* "int", "sse2", "avx2", "avx512", "qemu"; BEST names what it resolves to. */
KVMSTATS_API const char *kvmstats_zero__name(enum kvmstats_zero_impl impl);
/* Shorthand: the best variant. */
KVMSTATS_API bool kvmstats_is_zero(const void *buf, size_t len);

/* ---------------------------------------------------------------------
 * Guest RAM regions of a VMM.
 *
 * QEMU: its RAM blocks (name, used and total size, page size) are read
 * over QMP (x-query-ramblock, query-memdev) and matched against
 * /proc/PID/maps: a block is a read-write mapping of exactly its total
 * size, followed by QEMU's PROT_NONE guard page, anonymous or backed by a
 * memfd, hugetlbfs or a file. Only the used part is counted, as migration
 * sends only that.
 * Other VMMs (or QEMU without a reachable QMP socket): a heuristic, since
 * KVM's memory slots (KVM_SET_USER_MEMORY_REGION) are not visible from
 * outside: read-write mappings the VMM marked as guest memory
 * (MADV_DONTFORK/MADV_HUGEPAGE/MADV_MERGEABLE), else shared memory
 * (memfd, /dev/shm, hugetlbfs), else large anonymous mappings that are not
 * a heap, stack or malloc arena. Each region records why it was taken.
 * Caller's ranges (--region) override both.
 */
enum kvmstats_ram_kind {
	KVMSTATS_RAM_ANON,	/* private anonymous */
	KVMSTATS_RAM_SHMEM,	/* memfd, /dev/shm, shared anonymous */
	KVMSTATS_RAM_HUGETLB,	/* hugetlbfs or MAP_HUGETLB */
	KVMSTATS_RAM_FILE,	/* any other file (memory-backend-file) */
};

struct kvmstats_ram_region {
	uint64_t start;		/* address in the VMM */
	uint64_t len;		/* bytes of guest RAM (QEMU: used length) */
	uint64_t map_len;	/* bytes of the whole mapping from start */
	uint64_t file_offset;	/* of start, for file-backed kinds */
	uint64_t vma_start;	/* the mapping start lies in */
	uint32_t page_size;	/* backing page size (hugetlb: 2 MiB, 1 GiB) */
	enum kvmstats_ram_kind kind;
	bool shared;		/* MAP_SHARED (the VMM writes the file) */
	char name[64];		/* RAM block name, or what the map shows */
	char path[192];		/* backing file as in maps, "" if anonymous */
	char why[160];		/* how this region was found */
};

enum kvmstats_ram_how {
	KVMSTATS_RAM_QMP,	/* QEMU's RAM blocks over QMP */
	KVMSTATS_RAM_HEURISTIC,
	KVMSTATS_RAM_OVERRIDE,	/* the caller's ranges */
};

struct kvmstats_range {
	uint64_t start, end;	/* [start, end) */
};

enum kvmstats_ram_flags {
	KVMSTATS_RAM_NO_QMP = 1u << 0,	/* never talk to the VMM */
};

struct kvmstats_ram_opts {
	size_t sz;
	unsigned int flags;
	const char *qmp_path;	/* NULL: found from the VMM's command line */
	unsigned int timeout_ms;	/* whole QMP exchange; 0: 1000 */
	const struct kvmstats_range *ranges;	/* override, VMM addresses */
	size_t nranges;
	char *errbuf;
	size_t errbuf_sz;
};

struct kvmstats_ram;

/* Find @pid's guest RAM. The process is pinned with a pidfd. Fails with
 * -ESRCH (gone), -ENOENT (no region found), -EINVAL (a range that is not
 * inside a read-write mapping). */
KVMSTATS_API struct kvmstats_ram *
kvmstats_ram__open(pid_t pid, const struct kvmstats_ram_opts *opts);
KVMSTATS_API void kvmstats_ram__free(struct kvmstats_ram *ram);
KVMSTATS_API pid_t kvmstats_ram__pid(const struct kvmstats_ram *ram);
/* Readable (POLLIN) once the VMM exited. */
KVMSTATS_API int kvmstats_ram__pidfd(const struct kvmstats_ram *ram);
KVMSTATS_API bool kvmstats_ram__alive(const struct kvmstats_ram *ram);
KVMSTATS_API size_t kvmstats_ram__count(const struct kvmstats_ram *ram);
KVMSTATS_API const struct kvmstats_ram_region *
kvmstats_ram__region(const struct kvmstats_ram *ram, size_t i);
/* Sum of the regions' len. */
KVMSTATS_API uint64_t kvmstats_ram__bytes(const struct kvmstats_ram *ram);
KVMSTATS_API enum kvmstats_ram_how kvmstats_ram__how(const struct kvmstats_ram *ram);
KVMSTATS_API const char *kvmstats_ram_how_str(enum kvmstats_ram_how how);
/* Why QMP was not used, when it was not ("" otherwise). */
KVMSTATS_API const char *kvmstats_ram__note(const struct kvmstats_ram *ram);
/* Migration parameters read in the same QMP exchange (0: unknown):
 * max-bandwidth in bytes/s and downtime-limit in ms. */
KVMSTATS_API uint64_t kvmstats_ram__max_bandwidth(const struct kvmstats_ram *ram);
KVMSTATS_API uint32_t kvmstats_ram__downtime_ms(const struct kvmstats_ram *ram);
/* The QMP socket used or found ("" when none). */
KVMSTATS_API const char *kvmstats_ram__qmp_path(const struct kvmstats_ram *ram);

/* Parse "START-END" (hex with or without 0x, as /proc/PID/maps prints)
 * or "START+LEN" (LEN may end in K, M, G). 0 or -EINVAL. */
KVMSTATS_API int kvmstats_range__parse(const char *s, struct kvmstats_range *r);

/* ---------------------------------------------------------------------
 * Classification from the VMM's page tables.
 *
 * A page of guest RAM that is neither present nor swapped was never
 * written (anonymous memory) or is a hole (shared memory): it is zero. A
 * present page mapping the shared zero page is zero. A swapped page is
 * unknown (reading it would swap it in). Every other present page is a
 * candidate: only a content test tells whether it is zero (a THP backing
 * has present sub-pages the guest never wrote). Shared memory pages that
 * are in the page cache but not mapped by the VMM are candidates too.
 */
enum kvmstats_pagemap_mode {
	KVMSTATS_PAGEMAP_AUTO,	/* PAGEMAP_SCAN when the kernel has it */
	KVMSTATS_PAGEMAP_SCAN,	/* ioctl(PAGEMAP_SCAN), Linux 6.7+ */
	KVMSTATS_PAGEMAP_READ,	/* 8-byte entries of /proc/PID/pagemap */
};

struct kvmstats_pagemap_counts {
	uint64_t pages;		/* 4 KiB pages of guest RAM */
	uint64_t present;	/* mapped by the VMM (includes pfn_zero) */
	uint64_t pfn_zero;	/* mapped to the shared (huge) zero page */
	uint64_t huge;		/* present inside a THP or hugetlb page */
	uint64_t swapped;	/* unknown */
	uint64_t cached;	/* shared memory cached, not mapped by the VMM */
	uint64_t none;		/* not present, not swapped, not cached: zero */
	uint64_t candidates;	/* present - pfn_zero + cached: to be tested */
	/* Not classified within the pass's time (in swapped too: unknown). */
	uint64_t unclassified;
};

struct kvmstats_pages_opts {
	size_t sz;
	enum kvmstats_pagemap_mode mode;
	/* The pass's time; the pages not reached by then are unknown. The
	 * VMM chooses its address space, and 8-byte pagemap entries cost
	 * about 1 s per TiB of it. 0: 10 s. */
	unsigned int timeout_ms;
};

struct kvmstats_pages;

/* Classify every page of @ram's regions now. Keeps a reference to @ram
 * (which must outlive the result). -ESRCH when the VMM exited,
 * -EOPNOTSUPP when mode SCAN was asked for and the kernel lacks it. */
KVMSTATS_API struct kvmstats_pages *
kvmstats_pages__classify(const struct kvmstats_ram *ram,
			 const struct kvmstats_pages_opts *opts);
KVMSTATS_API void kvmstats_pages__free(struct kvmstats_pages *pg);
KVMSTATS_API const struct kvmstats_pagemap_counts *
kvmstats_pages__counts(const struct kvmstats_pages *pg);
/* "PAGEMAP_SCAN" or "pagemap". */
KVMSTATS_API const char *kvmstats_pages__mode(const struct kvmstats_pages *pg);
/* Wall time the classification took, in seconds. */
KVMSTATS_API double kvmstats_pages__elapsed(const struct kvmstats_pages *pg);
KVMSTATS_API const struct kvmstats_ram *
kvmstats_pages__ram(const struct kvmstats_pages *pg);
/* Is page @page (index from the region's start) of region @region a
 * candidate for the content test? */
KVMSTATS_API bool kvmstats_pages__candidate(const struct kvmstats_pages *pg,
					    size_t region, uint64_t page);
/* Does this kernel have PAGEMAP_SCAN? (asks with an empty range of our
 * own process) */
KVMSTATS_API bool kvmstats_pagemap_scan_supported(void);

/* ---------------------------------------------------------------------
 * Estimators of zero pages, reported side by side.
 */
enum kvmstats_method {
	KVMSTATS_METHOD_STATS,	/* KVM's pages_4k/2m/1g: a bound, in us */
	KVMSTATS_METHOD_PAGEMAP,	/* page tables only, in ms */
	KVMSTATS_METHOD_SAMPLE,	/* page tables + content of a sample */
	KVMSTATS_METHOD_SCAN,	/* page tables + content of every candidate */
	KVMSTATS_METHOD_NR,
};

KVMSTATS_API const char *kvmstats_method_str(enum kvmstats_method m);
/* Method by name, or -EINVAL. */
KVMSTATS_API int kvmstats_method_parse(const char *s);

struct kvmstats_estimate {
	enum kvmstats_method method;
	bool valid;		/* false: not available, see note */
	uint64_t pages;
	uint64_t zero_pages;	/* best estimate */
	uint64_t nonzero_pages;
	uint64_t unknown_pages;	/* swapped, or unreadable */
	double zero_lo, zero_hi;	/* bounds (stats, pagemap) or 95% CI */
	double coverage;	/* share of pages observed, not inferred */
	double elapsed_s;	/* wall time it cost */
	double cpu_s;		/* CPU time it cost (all threads) */
	uint64_t bytes_read;	/* guest memory read */
	uint64_t tested;	/* pages content-tested */
	char note[192];
	/* Candidates that went missing while they were read (the VMM
	 * truncated its file or punched a hole: gone from memory between
	 * the classification and the read, or during it), counted in
	 * unknown_pages. sample: scaled from the sample to the candidates. */
	uint64_t missing_pages;
	/* CPU time of the content test alone (scan: its workers, reading
	 * and testing bytes_read), without the classification. */
	double test_cpu_s;
};

/* From KVM's binary stats of the VMs @vmm holds (pages_4k + 512 *
 * pages_2m + 262144 * pages_1g, capped at @ram_pages): an upper bound on
 * touched memory, so a lower bound on zero pages. It counts mappings, not
 * unique pages. When the VMs ran (exits > 0, or exits unreadable) and the
 * sum is 0, the stats are not maintained by this KVM: the estimate is
 * marked invalid with that note rather than reporting zero. */
KVMSTATS_API int kvmstats_estimate__stats(const struct kvmstats_vmm *vmm,
					  uint64_t ram_pages,
					  struct kvmstats_estimate *e);
/* Page tables only: candidates counted as non-zero (an upper bound). */
KVMSTATS_API int kvmstats_pages__estimate(const struct kvmstats_pages *pg,
					  struct kvmstats_estimate *e);

struct kvmstats_sample_opts {
	size_t sz;
	uint32_t pages_per_gib;	/* of guest RAM; 0: 512 */
	uint32_t min_pages;	/* 0: 1024 */
	uint64_t seed;		/* 0: from the clock */
	enum kvmstats_zero_impl zero;
};

/* Page tables plus the content of a uniform random sample of the
 * candidates; zero share with a 95% (Wilson) interval. A sample as large
 * as the candidates tests them all (exact). */
KVMSTATS_API int kvmstats_pages__sample(const struct kvmstats_pages *pg,
					const struct kvmstats_sample_opts *opts,
					struct kvmstats_estimate *e);

/* Progress: @done of @total bytes; a non-zero return cancels. */
typedef int (*kvmstats_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct kvmstats_scan_opts {
	size_t sz;
	double max_cpu;		/* CPU budget in cores (0.5 = half a core); 0: 1 */
	uint64_t rate;		/* read budget, bytes/s over all threads; 0: none */
	enum kvmstats_zero_impl zero;
	uint32_t batch_bytes;	/* per process_vm_readv; 0: 1 MiB */
	kvmstats_progress_fn progress;	/* called ~10/s from the caller's thread */
	void *progress_arg;
};

/* Read every candidate and test it: anonymous RAM is copied with
 * process_vm_readv in large batches of many iovecs; shared and file RAM
 * is read with pread from the VMM's file (only candidates still in
 * memory: a hole is never touched). Never reads a page that was not
 * present, never faults (no SIGBUS when the VMM truncates its file): a
 * candidate gone meanwhile is unknown and counted in e->missing_pages.
 * Returns 0;
 * -ESRCH when the VMM exited mid-scan (e->note says so and the counts
 * are partial); -ECANCELED when progress asked to stop. */
KVMSTATS_API int kvmstats_pages__scan(const struct kvmstats_pages *pg,
				      const struct kvmstats_scan_opts *opts,
				      struct kvmstats_estimate *e);

/* ---------------------------------------------------------------------
 * Dirty rate, without disturbing the guest: a random sample of present
 * pages is hashed, then hashed again at several points in time; the
 * share that changed, scaled to the present pages, is the number of
 * pages dirtied within that time. That number grows concavely with time
 * (a guest rewrites its working set), so the curve is kept. Pages that
 * became present meanwhile are counted as dirtied too.
 */
#define KVMSTATS_DIRTY_MAX_POINTS 16

struct kvmstats_dirty_point {
	double t;		/* seconds since the baseline */
	uint64_t changed;	/* sampled pages whose hash changed */
	double pages;		/* pages dirtied within t (scaled) */
	double lo, hi;		/* 95% interval of pages */
};

struct kvmstats_dirty_result {
	uint64_t sampled;	/* pages hashed */
	uint64_t population;	/* present pages the sample stands for */
	uint64_t gone;		/* sampled pages no longer readable */
	uint64_t new_pages;	/* became present after the baseline */
	uint32_t npoints;
	struct kvmstats_dirty_point points[KVMSTATS_DIRTY_MAX_POINTS];
	double pages_per_second;	/* at the last point */
	double lo, hi;		/* 95% interval, pages/s */
	double elapsed_s, cpu_s;
	/* Present pages that went missing while they were hashed (not in
	 * memory when read): the most found at the baseline or any point,
	 * scaled to the population. Such pages count neither as dirtied
	 * nor as clean. */
	uint64_t missing_pages;
};

struct kvmstats_dirty_opts {
	size_t sz;
	uint32_t pages_per_gib;	/* of guest RAM; 0: 512 (QEMU's default) */
	uint32_t min_pages;	/* 0: 4096 */
	uint64_t seed;		/* 0: from the clock */
};

struct kvmstats_dirty;

/* Pick the sample among @pg's present pages and hash it (the baseline).
 * ETIME when @pg has pages it did not classify in time. */
KVMSTATS_API struct kvmstats_dirty *
kvmstats_dirty__new(const struct kvmstats_pages *pg,
		    const struct kvmstats_dirty_opts *opts);
/* Hash the sample again now and add a point. -ESRCH once the VMM is gone,
 * -ENOSPC past KVMSTATS_DIRTY_MAX_POINTS, -ETIME when the pages were not
 * all classified again in time (new pages would not be told apart). */
KVMSTATS_API int kvmstats_dirty__point(struct kvmstats_dirty *d);
KVMSTATS_API int kvmstats_dirty__result(const struct kvmstats_dirty *d,
					struct kvmstats_dirty_result *out);
KVMSTATS_API void kvmstats_dirty__free(struct kvmstats_dirty *d);
/* Blocking: baseline, then @points points spread over @interval_s
 * (at interval/2^(points-1), ..., interval/2, interval). */
KVMSTATS_API int kvmstats_dirty__measure(const struct kvmstats_pages *pg,
					 const struct kvmstats_dirty_opts *opts,
					 double interval_s, uint32_t points,
					 struct kvmstats_dirty_result *out);

/* ---------------------------------------------------------------------
 * Migration cost: QEMU's pre-copy, as QEMU 7.2's migration/ram.c sends
 * pages (see docs/readme/plan.md for the model and its sources):
 *  - a page header is a be64 (offset | flags), plus the RAM block's id
 *    (1 + strlen bytes) on the first page of a block in a pass;
 *  - a zero page (buffer_is_zero) is the header and one byte: 9 bytes,
 *    counted as "duplicate";
 *  - any other page is the header and 4096 bytes, counted as "normal";
 *  - each pass ends with an 8-byte EOS marker;
 *  - pass 0 sends every page; pass i+1 the pages dirtied during pass i;
 *    once the remaining dirty memory fits in bandwidth * downtime-limit
 *    the VM is stopped and the rest sent. It does not converge when the
 *    remaining memory stops shrinking.
 */
#define KVMSTATS_QEMU_PAGE_HEADER 8u
#define KVMSTATS_QEMU_ZERO_PAGE_BYTES (KVMSTATS_QEMU_PAGE_HEADER + 1u)
#define KVMSTATS_QEMU_NORMAL_PAGE_BYTES (KVMSTATS_QEMU_PAGE_HEADER + 4096u)
#define KVMSTATS_QEMU_EOS_BYTES 8u
/* QEMU 7.2's defaults for max-bandwidth and downtime-limit. */
#define KVMSTATS_QEMU_MAX_BANDWIDTH (128ull << 20)
#define KVMSTATS_QEMU_DOWNTIME_MS 300u

/* The end of the first pass: among the last @pages pages QEMU sends
 * in it (its RAM blocks in its own order, each to its end), @normal are
 * not zero (an expectation where swapped pages leave it unknown). The
 * pages left when the pending memory first falls under the threshold
 * are these: the top of a guest's RAM is often never touched, and then
 * the window that crosses the threshold sends them all. */
struct kvmstats_tail_point {
	uint64_t pages;
	double normal;
};

/* Points of a tail: at 1, 2, 4, ... 2^17 pages (512 MiB) at most, the
 * threshold of 1.7 GB/s at a 300 ms downtime limit; past them the model
 * takes the rest of the pass at its mean. */
#define KVMSTATS_TAIL_POINTS 18u

struct kvmstats_migrate_input {
	size_t sz;
	uint64_t zero_pages;
	uint64_t nonzero_pages;
	uint64_t unknown_pages;	/* sent as normal pages (the worst case) */
	uint32_t nblocks;	/* RAM blocks (one id per pass each) */
	uint64_t block_name_bytes;	/* sum of the blocks' name lengths */
	/* Pages dirtied within t seconds; NULL/0: a clean guest. */
	const struct kvmstats_dirty_point *curve;
	uint32_t npoints;
	double bandwidth;	/* bytes/s; 0: KVMSTATS_QEMU_MAX_BANDWIDTH */
	double downtime_s;	/* 0: KVMSTATS_QEMU_DOWNTIME_MS */
	uint32_t max_passes;	/* 0: 1000 syncs */
	/* The zero estimate's interval (pages); both 0: zero_pages is exact. */
	double zero_lo, zero_hi;
	/* Bytes/s one CPU reads and tests for zero on this host (the scan's
	 * own rate): QEMU tests every page of its first pass the same way,
	 * and a pass cannot be faster than that walk. 0: not modelled. */
	double walk_rate;
	/* CPUs the source's migration thread and multifd channels may run
	 * on: QEMU starts them from its main thread, whose affinity they
	 * keep (libvirt's <emulatorpin>, a cpuset). 0: this host's online
	 * CPUs. */
	uint32_t cpus;
	/* Bytes/s of the link, what QEMU sends without a rate limit runs at:
	 * the stop-and-copy (ram_save_complete() flushes regardless of
	 * max-bandwidth) and post-copy without max-postcopy-bandwidth.
	 * 0: not known, bandwidth taken (the downtime's upper bound). */
	double link_bw;
	/* CPUs the VMM kept busy while its dirty rate was sampled (its CPU
	 * time over that interval: the guest's vCPUs, no migration running
	 * yet); 0: idle, or not measured. Busy vCPUs that share the
	 * migration threads' CPUs make multifd's windows vary. */
	double vmm_busy;
	/* The first pass's end, points in increasing pages; NULL/0: its
	 * pages taken at the pass's mean cost. */
	const struct kvmstats_tail_point *tail;
	uint32_t ntail;
};

/* Whether the migration completes, with the inputs' uncertainty: the
 * model is run at the dirty curve's (and the zero estimate's) low and
 * high bounds as well as at the point estimate. In ranking order. */
enum kvmstats_verdict {
	KVMSTATS_VERDICT_CONVERGES,	/* completes at both bounds */
	KVMSTATS_VERDICT_UNCERTAIN,	/* completes at one bound only */
	KVMSTATS_VERDICT_NO,		/* completes at neither */
};

/* "converges", "uncertain", "does-not-converge". */
KVMSTATS_API const char *kvmstats_verdict_str(enum kvmstats_verdict v);

struct kvmstats_migrate_prediction {
	/* Where converges is false, bytes and seconds are what the model had
	 * sent when it gave up (the pending pages stalled, or too many
	 * syncs): no prediction; a caller shows them as unknown. */
	uint64_t bytes;		/* predicted wire bytes of RAM */
	double seconds;		/* total time at the bandwidth */
	uint32_t passes;	/* pre-copy passes, the stop-and-copy included */
	bool converges;
	bool assumed_clean;	/* no dirty curve was given */
	uint64_t first_pass_bytes;
	uint64_t final_bytes;	/* sent with the VM stopped */
	double downtime_s;	/* final_bytes / bandwidth */
	double dirty_pages_per_second;	/* rate the model used (last point) */
	char note[160];
	/* The inputs' uncertainty carried through (bytes and seconds at the
	 * low and high bounds; NAN where that bound does not complete).
	 * converges above is the point estimate's; the verdict says more. */
	enum kvmstats_verdict verdict;
	double seconds_lo, seconds_hi;
	double bytes_lo, bytes_hi;
	uint32_t dirty_samples;	/* dirty-rate intervals measured (0: none) */
	/* postcopy-ram: pre-copy's first pass, then the switch (the VM
	 * stopped for the device state and the discard of the pages dirtied
	 * meanwhile), then the post-copy phase: the guest runs on the
	 * destination and faults in what is not there yet. */
	bool postcopy;		/* the prediction switched to post-copy */
	double postcopy_s;	/* the post-copy phase */
	uint64_t postcopy_bytes;	/* sent in it */
	double postcopy_bw;	/* bytes/s it ran at */
};

KVMSTATS_API int kvmstats_migrate__predict(const struct kvmstats_migrate_input *in,
					   struct kvmstats_migrate_prediction *out);
/* Pages dirtied within @t seconds by a curve (interpolated; beyond its
 * end, the last slope; never more than @cap). */
KVMSTATS_API double kvmstats_dirty_curve_at(const struct kvmstats_dirty_point *c,
					    uint32_t n, double t, double cap);

/* ---------------------------------------------------------------------
 * Plan: all of it for one VMM, as `kvmstats plan` shows it.
 */
enum kvmstats_plan_flags {
	KVMSTATS_PLAN_ASSUME_CLEAN = 1u << 0,	/* skip the dirty rate */
};

/* Where libvirt holds a domain's QEMU monitor, a plan asks libvirt for
 * the domain's migration speed, on a thread of its own, within the RAM
 * options' timeout. Plans that share a guard keep at most one question
 * outstanding: while libvirt has not answered the last one, the next
 * plan is told so at once instead of starting another thread (a hung
 * daemon costs a planning loop one thread and one timeout, not one per
 * VM per round). It has its own lock: plans on several threads may
 * share one. */
struct kvmstats_libvirt_guard;
KVMSTATS_API struct kvmstats_libvirt_guard *kvmstats_libvirt_guard__new(void);
KVMSTATS_API void kvmstats_libvirt_guard__free(struct kvmstats_libvirt_guard *g);

struct kvmstats_plan_opts {
	size_t sz;
	unsigned int methods;	/* 1u << KVMSTATS_METHOD_*; 0: scan */
	unsigned int flags;
	double interval_s;	/* dirty rate over; 0: 1 s */
	uint32_t dirty_points;	/* 0: 4 */
	double bandwidth;	/* bytes/s; 0: QEMU's max-bandwidth, else default */
	double downtime_ms;	/* 0: QEMU's downtime-limit, else default */
	enum kvmstats_pagemap_mode pagemap_mode;
	const struct kvmstats_ram_opts *ram;	/* NULL: defaults */
	const struct kvmstats_scan_opts *scan;	/* NULL: defaults */
	uint32_t sample_pages_per_gib;	/* 0: 512 */
	uint32_t dirty_pages_per_gib;	/* 0: 512 */
	uint64_t seed;
	/* Where QMP is libvirt's: the daemon asked for the domain's
	 * migration speed (NULL: qemu:///system). */
	const char *libvirt_uri;
	/* NULL: this plan's question is its own. */
	struct kvmstats_libvirt_guard *libvirt_guard;
	double link_bw;	/* bytes/s of the link; 0: not known */
	/* The pagemap pass's time (kvmstats_pages_opts); 0: 10 s. */
	unsigned int pagemap_timeout_ms;
};

struct kvmstats_plan_vm {
	pid_t pid;
	char name[128];
	uint64_t memory_bytes;
	uint64_t pages;
	/* The estimate the prediction used: the most precise one made. */
	enum kvmstats_method method;
	unsigned int done;	/* 1u << method for each estimate made */
	struct kvmstats_estimate est[KVMSTATS_METHOD_NR];
	struct kvmstats_pagemap_counts counts;
	bool dirty_measured;
	struct kvmstats_dirty_result dirty;
	double bandwidth;
	const char *bandwidth_source;	/* "option", "qmp", "libvirt",
					 * "default" */
	double downtime_s;
	struct kvmstats_migrate_prediction pred;
	bool predicted;
	double elapsed_s;	/* everything, the dirty interval included */
	int error;		/* 0, or -errno of the step that failed */
	char error_msg[192];
	/* Pages of guest RAM that went missing while the plan read them
	 * (the VMM took them away): the most any estimate or dirty-rate
	 * pass found (estimated where it sampled). Unknown, never zero. */
	uint64_t missing_pages;
	/* Where the migration settings came from when QEMU's monitor could
	 * not be read (libvirt's, or why QEMU's defaults): "" when read. */
	char settings_note[256];
	/* The first pass's end, as read (kvmstats_migrate_input's tail). */
	struct kvmstats_tail_point tail[KVMSTATS_TAIL_POINTS];
	uint32_t ntail;
};

struct kvmstats_plan;

/* Find @pid's RAM (and the QMP migration parameters). */
KVMSTATS_API struct kvmstats_plan *
kvmstats_plan__new(pid_t pid, const struct kvmstats_plan_opts *opts,
		   char *errbuf, size_t errbuf_sz);
KVMSTATS_API void kvmstats_plan__free(struct kvmstats_plan *p);
KVMSTATS_API const struct kvmstats_ram *
kvmstats_plan__ram(const struct kvmstats_plan *p);
/* The stats estimator, from the core library's readers of this VMM
 * (call it when the methods include stats; @vmm NULL: unavailable). */
KVMSTATS_API int kvmstats_plan__stats(struct kvmstats_plan *p,
				      const struct kvmstats_vmm *vmm);
/* Progress of the scan (replaces the one in opts->scan). */
KVMSTATS_API void kvmstats_plan__set_progress(struct kvmstats_plan *p,
					      kvmstats_progress_fn fn, void *arg);
/* Classify and run the page-level estimators the methods ask for. */
KVMSTATS_API int kvmstats_plan__estimate(struct kvmstats_plan *p);
/* Dirty rate in steps, so that a caller can measure many VMs in one
 * interval: begin takes the baseline, point adds one point now. */
KVMSTATS_API int kvmstats_plan__dirty_begin(struct kvmstats_plan *p);
KVMSTATS_API int kvmstats_plan__dirty_point(struct kvmstats_plan *p);
/* Seconds since the baseline began to be read: a point's interval runs
 * from there, so a caller measuring many VMs times each VM's points by
 * its own age (the baselines are read one after the other). -ENODATA
 * when no dirty rate was begun. */
KVMSTATS_API int kvmstats_plan__dirty_age(const struct kvmstats_plan *p,
					  double *age_s);
/* One more dirty-rate interval on the same curve (a point at a longer
 * time), for a VM whose verdict is uncertain; counted in dirty_samples. */
KVMSTATS_API int kvmstats_plan__dirty_extend(struct kvmstats_plan *p);
/* Apply the model. */
KVMSTATS_API int kvmstats_plan__predict(struct kvmstats_plan *p);
/* estimate + dirty (sleeps the interval) + predict. */
KVMSTATS_API int kvmstats_plan__run(struct kvmstats_plan *p);
KVMSTATS_API const struct kvmstats_plan_vm *
kvmstats_plan__result(const struct kvmstats_plan *p);

/* Ranking key: the verdict (converges, uncertain, does not converge),
 * then predicted seconds; a VM whose plan failed sorts last. For qsort
 * of result pointers. */
KVMSTATS_API int kvmstats_plan_vm__compare(const struct kvmstats_plan_vm *a,
					   const struct kvmstats_plan_vm *b);

/* For `kvmstats serve`: the plan figures of @n VMs as Prometheus gauges
 * (text exposition format, with HELP and TYPE lines), labelled
 * {pid, name, method}:
 *   kvmstats_plan_memory_bytes, kvmstats_plan_zero_pages,
 *   kvmstats_plan_nonzero_pages, kvmstats_plan_unknown_pages,
 *   kvmstats_plan_zero_ratio, kvmstats_plan_dirty_pages_per_second,
 *   kvmstats_plan_predicted_transfer_bytes,
 *   kvmstats_plan_predicted_seconds, kvmstats_plan_converges,
 *   kvmstats_plan_elapsed_seconds, kvmstats_plan_rank,
 *   kvmstats_plan_predicted_low_seconds, _predicted_high_seconds,
 *   _predicted_transfer_low_bytes, _predicted_transfer_high_bytes
 *   (absent where that bound does not complete), kvmstats_plan_dirty_samples,
 *   kvmstats_plan_postcopy_seconds (with postcopy-ram), and
 *   kvmstats_plan_verdict{verdict="..."} 1 (one series per VM).
 * kvmstats_plan_converges is absent for a VM whose verdict is uncertain;
 * kvmstats_plan_predicted_transfer_bytes and _predicted_seconds for one
 * whose point prediction does not converge.
 * VMs whose plan failed are left out. Writes at most @len bytes (always
 * NUL-terminated when len > 0) and returns the length the whole text
 * needs, like snprintf; negative errno on bad arguments. */
KVMSTATS_API int kvmstats_plan__prometheus(const struct kvmstats_plan_vm *const *vms,
					   size_t n, char *buf, size_t len);

/* The per-VM gauges of a plan one by one, for an exporter that writes
 * its own text (kvmstats serve). kvmstats_plan__prometheus() writes all
 * but KVMSTATS_PLAN_GAUGE_MISSING. */
enum kvmstats_plan_gauge {
	KVMSTATS_PLAN_GAUGE_MEMORY,
	KVMSTATS_PLAN_GAUGE_ZERO,
	KVMSTATS_PLAN_GAUGE_NONZERO,
	KVMSTATS_PLAN_GAUGE_UNKNOWN,
	KVMSTATS_PLAN_GAUGE_MISSING,
	KVMSTATS_PLAN_GAUGE_RATIO,
	KVMSTATS_PLAN_GAUGE_DIRTY,
	KVMSTATS_PLAN_GAUGE_BYTES,
	KVMSTATS_PLAN_GAUGE_SECONDS,
	KVMSTATS_PLAN_GAUGE_CONVERGES,
	KVMSTATS_PLAN_GAUGE_SECONDS_LO,
	KVMSTATS_PLAN_GAUGE_SECONDS_HI,
	KVMSTATS_PLAN_GAUGE_BYTES_LO,
	KVMSTATS_PLAN_GAUGE_BYTES_HI,
	KVMSTATS_PLAN_GAUGE_DIRTY_SAMPLES,
	KVMSTATS_PLAN_GAUGE_POSTCOPY,
	KVMSTATS_PLAN_GAUGE_ELAPSED,
	KVMSTATS_PLAN_GAUGE_RANK,
	KVMSTATS_PLAN_GAUGE_NR,
};

/* Its metric name: "kvmstats_plan_memory_bytes", ... */
KVMSTATS_API const char *kvmstats_plan_gauge_str(enum kvmstats_plan_gauge g);
/* Its value for @v, NAN where unknown or not applicable (no sample, never
 * NaN: a dirty rate not measured, the zero ratio of no pages, the verdict
 * of an uncertain one, the point bytes and seconds of one that does not
 * converge, a bound that does not complete, post-copy without it). @rank
 * is @v's place among the VMs exported with it, 1 = cheapest
 * (kvmstats_plan_vm__compare()): KVMSTATS_PLAN_GAUGE_RANK's value. */
KVMSTATS_API double kvmstats_plan_vm__gauge(const struct kvmstats_plan_vm *v,
					    enum kvmstats_plan_gauge g,
					    size_t rank);

/* ---------------------------------------------------------------------
 * The migration as QEMU will run it: every setting that changes its cost,
 * read over QMP in the same short exchange as the RAM blocks
 * (query-version, query-migrate-capabilities, query-migrate-parameters),
 * overridden by what the caller says the migration will be run with
 * (libvirt sets these at migration time: virsh migrate --parallel,
 * --compressed, --auto-converge, --postcopy, --bandwidth), else QEMU's
 * defaults for its version. Each setting records where it came from.
 */
enum kvmstats_mig_src {
	KVMSTATS_MIG_SRC_DEFAULT,	/* QEMU's default (for its version) */
	KVMSTATS_MIG_SRC_QMP,		/* read from the running QEMU */
	KVMSTATS_MIG_SRC_OPTION,	/* the caller's override */
	KVMSTATS_MIG_SRC_LIBVIRT,	/* libvirt's, for a domain whose
					 * monitor it holds (the speed) */
	KVMSTATS_MIG_SRC_EXECUTABLE,	/* the VMM's executable (QEMU's
					 * version, where QMP was not read) */
};

enum kvmstats_mig_compress {
	KVMSTATS_MIG_COMPRESS_NONE,
	KVMSTATS_MIG_COMPRESS_ZLIB,
	KVMSTATS_MIG_COMPRESS_ZSTD,
	KVMSTATS_MIG_COMPRESS_OTHER,	/* qpl, uadk, qatzip: not modelled */
};

enum kvmstats_mig_zero {
	KVMSTATS_MIG_ZERO_LEGACY,	/* migration thread (QEMU < 9.0: always) */
	KVMSTATS_MIG_ZERO_MULTIFD,	/* the multifd channels (9.0+ default) */
	KVMSTATS_MIG_ZERO_NONE,		/* zero pages sent as normal pages */
};

enum kvmstats_mig_key {
	KVMSTATS_MIG_BANDWIDTH,		/* max-bandwidth */
	KVMSTATS_MIG_SWITCHOVER_BW,	/* avail-switchover-bandwidth */
	KVMSTATS_MIG_DOWNTIME,		/* downtime-limit */
	KVMSTATS_MIG_MULTIFD,		/* capability multifd */
	KVMSTATS_MIG_CHANNELS,		/* multifd-channels */
	KVMSTATS_MIG_COMPRESSION,	/* multifd-compression */
	KVMSTATS_MIG_LEVEL,		/* multifd-zlib-level / -zstd-level */
	KVMSTATS_MIG_ZERO_DETECT,	/* zero-page-detection */
	KVMSTATS_MIG_AUTO_CONVERGE,	/* capability auto-converge */
	KVMSTATS_MIG_THROTTLE_INITIAL,	/* cpu-throttle-initial */
	KVMSTATS_MIG_THROTTLE_INCREMENT,	/* cpu-throttle-increment */
	KVMSTATS_MIG_XBZRLE,		/* capability xbzrle */
	KVMSTATS_MIG_POSTCOPY,		/* capability postcopy-ram */
	KVMSTATS_MIG_THROTTLE_MAX,	/* max-cpu-throttle */
	KVMSTATS_MIG_POSTCOPY_BW,	/* max-postcopy-bandwidth */
	KVMSTATS_MIG_THROTTLE_TRIGGER,	/* throttle-trigger-threshold */
	KVMSTATS_MIG_THROTTLE_TAILSLOW,	/* cpu-throttle-tailslow */
	KVMSTATS_MIG_NKEYS,
};

struct kvmstats_migrate_settings {
	unsigned int qemu_major, qemu_minor;	/* 0.0: unknown (7.2 assumed) */
	double bandwidth;		/* bytes/s */
	double switchover_bw;		/* bytes/s; 0: not set */
	double downtime_s;
	bool multifd;
	unsigned int channels;
	enum kvmstats_mig_compress compress;
	int level;
	enum kvmstats_mig_zero zero_detect;
	bool auto_converge;
	unsigned int throttle_initial, throttle_increment;	/* percent */
	bool xbzrle;
	bool postcopy;
	enum kvmstats_mig_src src[KVMSTATS_MIG_NKEYS];
	unsigned int throttle_max;	/* percent (99 by default) */
	double postcopy_bw;		/* bytes/s; 0: unlimited (the default) */
	unsigned int throttle_trigger;	/* percent (50 by default) */
	bool throttle_tailslow;
	enum kvmstats_mig_src version_src;	/* of qemu_major/minor */
};

/* What the caller says the migration will be run with (0 / -1: not
 * said, keep QEMU's). */
struct kvmstats_migrate_overrides {
	size_t sz;
	double bandwidth;		/* bytes/s; 0: not said */
	double downtime_ms;		/* 0: not said */
	unsigned int parallel;		/* multifd with N channels; 0: not said */
	int compress;			/* enum kvmstats_mig_compress; -1: not said */
	int auto_converge;		/* 0/1; -1: not said */
	int postcopy;			/* 0/1; -1: not said */
	double postcopy_bw;		/* bytes/s after the switch; 0: not said */
};

/* "max-bandwidth", "multifd-channels", ... (QEMU's names). */
KVMSTATS_API const char *kvmstats_mig_key_str(enum kvmstats_mig_key k);
/* "default", "qmp", "option". */
KVMSTATS_API const char *kvmstats_mig_src_str(enum kvmstats_mig_src s);
/* "none", "zlib", "zstd", "other"; and back (-EINVAL). */
KVMSTATS_API const char *kvmstats_mig_compress_str(enum kvmstats_mig_compress c);
KVMSTATS_API int kvmstats_mig_compress_parse(const char *s);
/* "legacy", "multifd", "none". */
KVMSTATS_API const char *kvmstats_mig_zero_str(enum kvmstats_mig_zero z);
/* A setting's value as text ("33554432", "true", "zstd"). */
KVMSTATS_API int kvmstats_migrate_settings__value(const struct kvmstats_migrate_settings *s,
						  enum kvmstats_mig_key k, char *buf,
						  size_t len);

/* The settings a plan used (QEMU's, the overrides, the defaults). */
KVMSTATS_API const struct kvmstats_migrate_settings *
kvmstats_plan__settings(const struct kvmstats_plan *p);
/* Apply the caller's overrides (before kvmstats_plan__predict). */
KVMSTATS_API int kvmstats_plan__set_overrides(struct kvmstats_plan *p,
					      const struct kvmstats_migrate_overrides *o);

/* What the pages compress to, from a sample compressed with the
 * library and level QEMU's multifd would use. */
struct kvmstats_compress_estimate {
	bool valid;
	enum kvmstats_mig_compress method;
	int level;
	uint64_t pages;			/* non-zero pages compressed */
	uint64_t in_bytes, out_bytes;
	double ratio;			/* out / in */
	double elapsed_s;
	char note[128];
	/* CPU seconds in the compressor alone: what a channel spends on
	 * these pages, already in its memory (elapsed_s adds reading them
	 * from the VMM, and testing them for zero). */
	double cpu_s;
};

/* How the model ran this migration: the mechanism and what it cost. */
struct kvmstats_migrate_detail {
	const char *mechanism;		/* "legacy", "multifd", "multifd+zstd" ... */
	double effective_bw;		/* bytes/s the transfer ran at */
	uint64_t packets;		/* multifd packets */
	uint64_t wire_bytes;		/* what went over the wire (compressed) */
	struct kvmstats_compress_estimate compress;
	/* auto-converge: the highest CPU throttle the guest would suffer
	 * (percent, 0: none) and for how long it is throttled at all. */
	unsigned int max_throttle;
	double throttled_s;
	char not_modelled[160];		/* settings on that the model ignores */
	/* QEMU's zero test of the first pass: the rate it was modelled at
	 * (walk_rate times the threads that test) and its seconds; 0: not
	 * modelled (no rate, or no test: multifd before 9.0, or
	 * zero-page-detection none). */
	double walk_rate;
	double walk_s;
	/* The CPUs the model gave the source's threads, and whence:
	 * "affinity" (the VMM's) or "host" (this host's online CPUs). */
	uint32_t cpus;
	const char *cpus_source;
	/* bytes/s of the link the stop-and-copy (and post-copy without
	 * max-postcopy-bandwidth) was modelled at; 0: not known, taken at
	 * max-bandwidth. */
	double link_bw;
	/* The CPUs the VMM kept busy (the input's vmm_busy; a plan's is NAN
	 * where it could not read the VMM's CPU time), and whether
	 * multifd's windows were modelled as varying for it. */
	double vmm_busy;
	bool windows_vary;
};

KVMSTATS_API const struct kvmstats_migrate_detail *
kvmstats_plan__detail(const struct kvmstats_plan *p);

#ifdef __cplusplus
}
#endif

#endif /* KVMSTATS_MEM_H */
