/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Internal declarations of the memory side (mem_*.c, migrate_*.c). */
#ifndef KVMSTATS_MEM_INTERNAL_H
#define KVMSTATS_MEM_INTERNAL_H

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"
#include "kvmstats_mem.h"

#define KS_PAGE_SHIFT 12
#define KS_PAGE KVMSTATS_PAGE_SIZE

/* A mount of the VMM's (mem_file.c). */
struct ks_mount {
	uint64_t id;		/* mountinfo's mount ID (statx's stx_mnt_id) */
	dev_t dev;
	char type[32];
};

struct kvmstats_ram {
	pid_t pid;
	int pidfd;
	enum kvmstats_ram_how how;
	struct kvmstats_ram_region *r;
	size_t n, r_cap;
	uint64_t bytes;
	uint64_t max_bandwidth;
	uint32_t downtime_ms;
	bool mig_read;		/* mig holds what QEMU said over QMP */
	struct kvmstats_migrate_settings mig;
	char note[224];
	char qmp_path[108];
	/* our memfds' devices and the VMM's mounts: see mem_file.c */
#define KS_MEMFD_DEVS 4
	dev_t memfd_dev[KS_MEMFD_DEVS];
	struct ks_mount *mounts;
	size_t nmounts;
};

/* One region's classification: a bitmap of the candidates (pages whose
 * content only a test can tell) and, per 4096-page block, the number of
 * candidates before it, to pick the k-th candidate quickly. */
struct ks_pg_region {
	uint64_t npages;
	uint64_t *cand;
	uint64_t ncand;
	uint64_t *rank;		/* per block of 64 words */
	uint64_t first;		/* candidates in the regions before this one */
	uint64_t cached;	/* candidates the VMM does not map */
};

struct kvmstats_pages {
	const struct kvmstats_ram *ram;
	struct kvmstats_pagemap_counts c;
	const char *mode;
	unsigned int timeout_ms;	/* as asked: a dirty point classifies again */
	double elapsed;
	size_t n;
	struct ks_pg_region *r;
};

#define KS_RANK_WORDS 64u

static inline bool ks_bit(const uint64_t *map, uint64_t i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

static inline void ks_set_bit(uint64_t *map, uint64_t i)
{
	map[i / 64] |= 1ull << (i % 64);
}

/* Bits set in [@from, @to) of @map, a word at a time. */
static inline uint64_t ks_count_bits(const uint64_t *map, uint64_t from, uint64_t to)
{
	uint64_t n = 0;

	while (from < to && from % 64)
		n += ks_bit(map, from++);
	for (; from + 64 <= to; from += 64)
		n += (uint64_t)__builtin_popcountll(map[from / 64]);
	while (from < to)
		n += ks_bit(map, from++);
	return n;
}

/* The k-th candidate (0-based) over all regions. */
int ks_pages_nth(const struct kvmstats_pages *pg, uint64_t k, size_t *region,
		 uint64_t *page);
/* The next run of candidates in @region at or after *page and before
 * @end: sets *page to its first page and returns its length, at most
 * @max (0 when none is left before @end). Only the words up to @end are
 * looked at: a scan's chunk of a region that is empty past it costs its
 * own words, not the rest of the region's. */
uint64_t ks_pages_next_run(const struct kvmstats_pages *pg, size_t region,
			   uint64_t *page, uint64_t end, uint64_t max);

/* mem_tail.c: the end of QEMU's first pass, walked back from its last
 * page up to @max_pages: points at 1, 2, 4, ... pages and where the walk
 * ended (*n of them, KVMSTATS_TAIL_POINTS at most). */
int ks_pages_tail(const struct kvmstats_pages *pg, uint64_t max_pages,
		  struct kvmstats_tail_point *out, uint32_t *n);

/* pidfd of a process, and whether it still runs. */
int ks_pidfd_open(pid_t pid);
bool ks_pidfd_alive(int pidfd);
/* Whether the process of @pidfd (@pid) is gone or on its way: its
 * memory goes before its pidfd tells (PF_EXITING). */
bool ks_vmm_gone(int pidfd, pid_t pid);

/* mem_file.c: the file behind a shared mapping, read only on a file
 * system the kernel serves alone (none a process can stall). */
/* Our memfds' devices and the VMM's mounts, once per RAM object. */
void ks_file_probe(struct kvmstats_ram *ram);
/* The file of the mapping @start-@end as an O_PATH fd (opens nothing). */
int ks_map_file_path(pid_t pid, uint64_t start, uint64_t end);
/* 0 if we may read the file of O_PATH @fd; -EREMOTE, its file system's
 * type (or device) in @type, if not. */
int ks_file_readable(const struct kvmstats_ram *ram, int fd, char *type,
		     size_t len);
/* Open the file behind a shared or file-backed region (through
 * /proc/PID/map_files), read-only; -EREMOTE where ks_file_readable()
 * refuses it. */
int ks_region_open(const struct kvmstats_ram *ram,
		   const struct kvmstats_ram_region *r);

/* 64-bit hash of one page, for change detection. */
uint64_t ks_hash_page(const void *page);

/* Small, fast PRNG (xorshift64*), state owned by the caller. */
static inline uint64_t ks_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static inline uint64_t ks_seed(uint64_t seed)
{
	if (!seed)
		seed = ks_now_ns() ^ ((uint64_t)getpid() << 32);
	return seed ? seed : 1;
}

/* Uniform in [0, n) without modulo bias worth caring about (n < 2^40). */
static inline uint64_t ks_rand_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)ks_rand(s) * n) >> 64);
}

static inline void ks_sleep(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}

/* Seconds since a dirty sampler took its baseline. */
double ks_dirty_age(const struct kvmstats_dirty *d);

/* Sample size: @per_gib pages per GiB of guest RAM (0: 512), at least
 * @min_pages (0: 1024), at most @population. */
uint64_t ks_sample_size(const struct kvmstats_pages *pg, uint32_t per_gib,
			uint32_t min_pages, uint64_t population);

/* @n distinct indices below @total, sorted (so that reads go in address
 * order and neighbours merge); all of them when n >= total. */
int ks_pick_sorted(uint64_t *idx, uint64_t n, uint64_t total, uint64_t *seed);

/* Append "; N WHAT pages went missing while read" to an estimate's note. */
void ks_note_missing(char *note, size_t len, uint64_t n, const char *what);
/* Appends to @note how many of @pg's pages its pass had no time for. */
void ks_note_unclassified(char *note, size_t len, const struct kvmstats_pages *pg);

/* 95% Wilson score interval of a proportion k/n. */
void ks_wilson(uint64_t k, uint64_t n, double *lo, double *hi);

static inline double ks_thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double ks_secs(uint64_t ns)
{
	return (double)ns * 1e-9;
}

/* Read @n pages at remote addresses @addr[] of @pid into @buf (n * 4 KiB)
 * with process_vm_readv, contiguous pages merged into one iovec, up to
 * IOV_MAX iovecs a call. ok[i] tells whether page i could be read (a
 * page whose mapping vanished cannot). Returns the number read, or
 * -ESRCH when the process is gone. */
long ks_read_pages(pid_t pid, const uint64_t *addr, size_t n, void *buf,
		   bool *ok);

/* Where the content of guest pages can be read, without a fault
 * (mem_view.c): anonymous and private memory through process_vm_readv,
 * shared memory with pread on its file (never a page that is not in
 * memory). A page that was gone when read is unknown: the callers count
 * it as missing. */
struct ks_view {
	const struct kvmstats_pages *pg;
	int *fd;		/* per region: its file, or -1 */
	const unsigned char **map;	/* per region: our mapping of that file,
					 * never loaded from: mincore() only */
	size_t *maplen;
	bool *blind;		/* per region: cannot be read safely */
};

struct ks_pageref {
	size_t region;
	uint64_t page;
};

int ks_view_open(struct ks_view *v, const struct kvmstats_pages *pg);
void ks_view_close(struct ks_view *v);
/* Read pages [page, page + n) of @region, which has a file (fd >= 0),
 * into @buf (n * 4 KiB). ok[i]: page i was in memory before the read,
 * and read in full; with @recheck, in memory after it too (else call
 * ks_view_recheck on the pages that need it: only a page read as zeros
 * can be a hole read). @vec is n bytes of scratch. Returns the pages
 * read. */
size_t ks_view_read(const struct ks_view *v, size_t region, uint64_t page,
		    size_t n, unsigned char *buf, unsigned char *vec, bool *ok,
		    bool recheck);
/* Clear ok[i] of the pages of [page, page + n) not in memory now. */
void ks_view_recheck(const struct ks_view *v, size_t region, uint64_t page,
		     size_t n, unsigned char *vec, bool *ok);
/* Read pages @refs[0..n) (n <= 256) into @buf (n * 4 KiB): ptr[i] points
 * at page i's copy, or is NULL when it could not be read (its region is
 * blind, or the page went missing). @addr and @ok are scratch of n
 * entries. Returns the number read, or -ESRCH when the VMM is gone. */
long ks_view_fetch(const struct ks_view *v, const struct ks_pageref *refs,
		   size_t n, unsigned char *buf, uint64_t *addr, bool *ok,
		   const unsigned char **ptr);
/* ks_view_fetch(), then of the pages read (added to *read) those that are
 * zero (added to *zeros). Returns 0 or -ESRCH. */
int ks_view_count_zero(const struct ks_view *v, const struct ks_pageref *refs,
		       size_t n, unsigned char *buf, uint64_t *addr, bool *ok,
		       const unsigned char **ptr, uint64_t *read, uint64_t *zeros);
/* Was the page at @ref, which a fetch could not read (@ptr NULL), missing
 * (rather than in a region that is not read at all)? */
static inline bool ks_view_missing(const struct ks_view *v,
				   const struct ks_pageref *ref,
				   const unsigned char *ptr)
{
	return !ptr && !v->blind[ref->region];
}

/* migrate_settings.c: QEMU's migration settings (over @q, in the RAM
 * blocks' exchange), its defaults, and the caller's overrides. */
struct ks_qmp;
void ks_migrate_qmp(struct ks_qmp *q, uint64_t deadline,
		    struct kvmstats_migrate_settings *s);
void ks_migrate_defaults(struct kvmstats_migrate_settings *s);
void ks_migrate_override(struct kvmstats_migrate_settings *s,
			 const struct kvmstats_migrate_overrides *o);

/* qemu_exe.c: QEMU's version as its executable names it: X.Y of the
 * first "QEMU emulator version X.Y" in @buf's @len bytes, or in the file
 * @fd (-ENOENT: none; -EFBIG, -ETIMEDOUT); and as the executable of @pid
 * names it, into @s with its source (-errno, with @why where there is
 * more to say). */
int ks_version_in(const char *buf, size_t len, unsigned int *major,
		  unsigned int *minor);
int ks_exe_version_scan(int fd, uint64_t deadline, unsigned int *major,
			unsigned int *minor);
int ks_qemu_exe_version(pid_t pid, uint64_t deadline,
			struct kvmstats_migrate_settings *s, char *why,
			size_t len);

/* migrate_libvirt.c: a libvirt domain's migration speed (its monitor
 * is libvirt's), over @s where libvirt gave it.
 * libvirt's speed when none was set is its "unlimited" (8796093022207
 * MiB/s): anything from 1 TiB/s up is taken as that. 0, or -errno with
 * @out->why (-ENOENT: not libvirt's, -ETIMEDOUT, -EBUSY: @g's last
 * question is unanswered, -EPERM, ...). */
#define KS_LIBVIRT_SPEED_UNLIMITED_MIB (1ul << 20)
struct ks_libvirt_mig {
	bool speed_unlimited;
	char why[192];
};
int ks_migrate_libvirt(pid_t pid, const char *uri, unsigned int timeout_ms,
		       struct kvmstats_libvirt_guard *g,
		       struct kvmstats_migrate_settings *s,
		       struct ks_libvirt_mig *out);

/* migrate_follow.c: one query-migrate answer @r as a migration. */
struct json_object;
struct kvmstats_migration;
void ks_follow_take_info(struct kvmstats_migration *m, struct json_object *r);

/* migrate_compress.c: compress a sample of @pg's non-zero pages as a
 * multifd channel would (bounded: at most @max_pages pages, @max_s s). */
int ks_compress_sample(const struct kvmstats_pages *pg, enum kvmstats_mig_compress m,
		       int level, uint64_t seed, uint32_t max_pages, double max_s,
		       struct kvmstats_compress_estimate *out);

/* migrate_multifd.c: multifd's bytes and time. */
struct ks_mig_pages {
	double zero, normal;	/* pages of a pass */
	double blocks;		/* RAM blocks touched */
};
void ks_multifd_pass(const struct kvmstats_migrate_settings *s,
		     const struct kvmstats_compress_estimate *c,
		     const struct ks_mig_pages *pg, double *reported, double *wire);
/* The packets that may be in flight over a window's budget, and how
 * many are on @cpus CPUs the guest keeps @busy busy; one window's bytes
 * at max-bandwidth @bw with @k in flight; the mean rate, @k from @lo to
 * @hi. */
unsigned int ks_multifd_inflight(const struct kvmstats_migrate_settings *s);
void ks_multifd_inflight_range(const struct kvmstats_migrate_settings *s,
			       double cpus, double busy, unsigned int *lo,
			       unsigned int *hi);
double ks_multifd_bandwidth(const struct kvmstats_migrate_settings *s, double bw,
			    unsigned int lo, unsigned int hi);
double ks_multifd_window(const struct kvmstats_migrate_settings *s, double bw,
			 unsigned int k);
/* Threads that test pages for zero: the channels (9.0+ multifd with
 * zero-page-detection=multifd), the migration thread (1), or none (0:
 * zero-page-detection=none). */
unsigned int ks_multifd_zero_testers(const struct kvmstats_migrate_settings *s);
/* The channels test their pages for zero, then compress them. */
bool ks_multifd_tests_zero(const struct kvmstats_migrate_settings *s);
double ks_migrate_fixed_bytes(const struct kvmstats_migrate_settings *s);

/* Device state of our test VM (one vCPU, no devices), taken as the usual
 * case: what QEMU 8.x+ counts in ram.transferred, and what a switch to
 * post-copy sends with the VM stopped. */
#define KS_MIG_DEVICE_STATE_BYTES 125000.0

/* migrate_postcopy.c: the switch to post-copy with @dirty_pages dirtied
 * since they were sent, and the post-copy phase. */
struct ks_postcopy {
	double switch_bytes;	/* discard ranges + device state, VM stopped */
	double downtime_s;
	double bytes;		/* sent in the post-copy phase */
	double seconds;		/* the post-copy phase */
	double bw;		/* its bandwidth */
};
double ks_postcopy_bandwidth(const struct kvmstats_migrate_settings *s, double bw);
void ks_postcopy_switch(const struct kvmstats_migrate_settings *s, double bw,
			double dirty_pages, struct ks_postcopy *pc);

/* migrate_throttle.c: auto-converge's CPU throttle over the passes. */
struct ks_throttle {
	bool on;
	unsigned int pct, high;	/* current throttle, periods over threshold */
	double period_t, period_sent, period_dirty;
	double throttled_s;
	unsigned int max;
};
unsigned int ks_throttle_max(const struct kvmstats_migrate_settings *s);
void ks_throttle_sync(struct ks_throttle *th, const struct kvmstats_migrate_settings *s,
		      double now, double sent, double dirtied_pages);

/* migrate_model.c: pre-copy over a dirty curve (@s NULL: QEMU 7.2's
 * legacy defaults), as the plan runs it. Which pages the guest dirties:
 * KS_MIG_RUN_UNIFORM, uniform over its working set (the estimate);
 * KS_MIG_RUN_APART, apart from the pages still pending as far as the
 * working set allows (the high bound). */
#define KS_MIG_RUN_UNIFORM 0u
#define KS_MIG_RUN_APART 1u
/* Where windows vary (multifd 8.x+: ks_multifd_window()), the draws of
 * path @n (0: the first) of the many the verdict runs. */
#define KS_MIG_RUN_PATH(n) ((unsigned int)(n) << 8)
#define KS_MIG_RUN_PATH_OF(flags) ((flags) >> 8)
/* Whether multifd's windows vary for @in (the verdict then runs many
 * paths). */
bool ks_migrate_windows_vary(const struct kvmstats_migrate_input *in,
			     const struct kvmstats_migrate_settings *s);
int ks_migrate_run(const struct kvmstats_migrate_input *input,
		   const struct kvmstats_migrate_settings *s,
		   const struct kvmstats_compress_estimate *c,
		   struct kvmstats_migrate_prediction *out,
		   struct kvmstats_migrate_detail *d, unsigned int flags);
/* migrate_verdict.c: ks_migrate_run at the point estimate and at the
 * inputs' low and high bounds: the verdict and the intervals. */
int ks_migrate_predict(const struct kvmstats_migrate_input *input,
		       const struct kvmstats_migrate_settings *s,
		       const struct kvmstats_compress_estimate *c,
		       struct kvmstats_migrate_prediction *out,
		       struct kvmstats_migrate_detail *d);
#endif
