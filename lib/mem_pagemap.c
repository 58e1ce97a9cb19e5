// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Classifying guest RAM from the VMM's page tables, without touching it.
 *
 * PAGEMAP_SCAN (Linux 6.7, an ioctl on /proc/PID/pagemap) returns ranges
 * of pages that share categories, so a mostly idle VM of many GiB costs a
 * few calls: we ask for the pages that are present or swapped and get the
 * present / swapped / PFN-zero / huge categories of each range; every page
 * not reported is neither present nor swapped. Without it, the 8-byte
 * entries of /proc/PID/pagemap are read (bit 63 present, bit 62 swapped,
 * bits 0-54 the PFN, root only) and the PFN compared with the zero page's,
 * which we find by read-faulting a page of our own anonymous memory (and
 * a THP-sized one for the huge zero page); THP membership then comes from
 * /proc/kpageflags.
 *
 * Shared memory (memfd, shm, files) can hold data the VMM has not mapped:
 * for those regions, pages the VMM does not map are looked up in the file
 * itself: SEEK_HOLE/SEEK_DATA finds the holes (zero, never allocated) and
 * mincore() on a read-only mapping of ours (which faults nothing) tells
 * whether a data page is in the page cache (a candidate) or not (swapped
 * or on disk: unknown).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem_internal.h"

/* The PAGEMAP_SCAN ABI as documented for Linux 6.7 (linux/fs.h); spelled
 * out here because the build host's headers may predate it. */
struct ks_page_region {
	uint64_t start;
	uint64_t end;
	uint64_t categories;
};

struct ks_pm_scan_arg {
	uint64_t size;
	uint64_t flags;
	uint64_t start;
	uint64_t end;
	uint64_t walk_end;
	uint64_t vec;
	uint64_t vec_len;
	uint64_t max_pages;
	uint64_t category_inverted;
	uint64_t category_mask;
	uint64_t category_anyof_mask;
	uint64_t return_mask;
};

#define KS_PAGE_IS_FILE (1ull << 2)
#define KS_PAGE_IS_PRESENT (1ull << 3)
#define KS_PAGE_IS_SWAPPED (1ull << 4)
#define KS_PAGE_IS_PFNZERO (1ull << 5)
#define KS_PAGE_IS_HUGE (1ull << 6)
#define KS_PAGEMAP_SCAN _IOWR('f', 16, struct ks_pm_scan_arg)

#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_PFN_MASK ((1ull << 55) - 1)
#define KPF_HUGE 17
#define KPF_THP 22

#define SCAN_VEC 512
#define READ_CHUNK 65536u	/* pagemap entries per pread */
#define DEFAULT_TIMEOUT_MS 10000u

struct classify {
	struct kvmstats_pages *pg;
	int pagemap;		/* /proc/PID/pagemap */
	int kpageflags;		/* -1 when unreadable */
	uint64_t zero_pfn, huge_zero_pfn;	/* 0: unknown */
	uint64_t *buf;		/* READ_CHUNK entries, or SCAN_VEC regions */
	/* Shared file regions: pages the VMM maps (present or swapped). */
	uint64_t *mapped;
	uint64_t deadline;	/* ks_now_ns() past which nothing is read */
	bool late;		/* the deadline has passed */
};

static int dead_or(const struct kvmstats_pages *pg, int err)
{
	return ks_vmm_gone(pg->ram->pidfd, pg->ram->pid) ? -ESRCH : err;
}

/* The pass's time is up. Checked between reads of up to READ_CHUNK
 * entries or SCAN_VEC ranges: a VMM chooses how large its address space
 * is, not how long we walk it. */
static bool late(struct classify *c)
{
	if (!c->late && ks_now_ns() > c->deadline)
		c->late = true;
	return c->late;
}

/* Pages [@from, @to) of a region (of them, where @mapped, those the VMM
 * does not map) are unknown: not classified in time (@timed_out), or
 * behind a file we do not read. */
static void unknown(struct classify *c, const uint64_t *mapped, uint64_t from,
		    uint64_t to, bool timed_out)
{
	uint64_t n = to - from;

	if (mapped)
		n -= ks_count_bits(mapped, from, to);
	c->pg->c.swapped += n;
	if (timed_out)
		c->pg->c.unclassified += n;
}

/* ---- PAGEMAP_SCAN ---- */

static int scan_ioctl(int fd, uint64_t start, uint64_t end,
		      struct ks_page_region *vec, size_t n, uint64_t *walk_end)
{
	struct ks_pm_scan_arg a = {
		.size = sizeof(a),
		.start = start,
		.end = end,
		.vec = (uint64_t)(uintptr_t)vec,
		.vec_len = n,
		.category_anyof_mask = KS_PAGE_IS_PRESENT | KS_PAGE_IS_SWAPPED,
		.return_mask = KS_PAGE_IS_PRESENT | KS_PAGE_IS_SWAPPED |
			       KS_PAGE_IS_PFNZERO | KS_PAGE_IS_HUGE,
	};
	int r = ioctl(fd, KS_PAGEMAP_SCAN, &a);

	if (r < 0)
		return -errno;
	*walk_end = a.walk_end;
	return r;
}

bool kvmstats_pagemap_scan_supported(void)
{
	static const char probe = 1;	/* a mapped page of ours */
	struct ks_page_region v;
	uint64_t start = (uintptr_t)&probe & ~(uint64_t)(KS_PAGE - 1), end;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC), r;

	if (fd < 0)
		return false;
	r = scan_ioctl(fd, start, start + KS_PAGE, &v, 1, &end);
	close(fd);
	return r >= 0;
}

static void count_range(struct classify *c, struct ks_pg_region *pr,
			uint64_t idx, uint64_t n, uint64_t cat)
{
	struct kvmstats_pagemap_counts *k = &c->pg->c;

	for (uint64_t i = idx; c->mapped && i < idx + n; i++)
		ks_set_bit(c->mapped, i);
	if (!(cat & KS_PAGE_IS_PRESENT)) {
		k->swapped += n;
		return;
	}
	k->present += n;
	if (cat & KS_PAGE_IS_HUGE)
		k->huge += n;
	if (cat & KS_PAGE_IS_PFNZERO) {
		k->pfn_zero += n;
		return;
	}
	for (uint64_t i = idx; i < idx + n; i++)
		ks_set_bit(pr->cand, i);
}

static int classify_scan(struct classify *c, const struct kvmstats_ram_region *r,
			 struct ks_pg_region *pr, uint64_t *done)
{
	struct ks_page_region *vec = (struct ks_page_region *)c->buf;
	uint64_t at = r->start, end = r->start + r->len;

	for (; at < end && !late(c); *done = (at - r->start) >> KS_PAGE_SHIFT) {
		uint64_t walk_end = end;
		int n = scan_ioctl(c->pagemap, at, end, vec, SCAN_VEC, &walk_end);

		if (n < 0)
			return dead_or(c->pg, n);
		for (int i = 0; i < n; i++) {
			uint64_t s = vec[i].start < at ? at : vec[i].start;
			uint64_t e = vec[i].end > end ? end : vec[i].end;

			if (e > s)
				count_range(c, pr, (s - r->start) >> KS_PAGE_SHIFT,
					    (e - s) >> KS_PAGE_SHIFT, vec[i].categories);
		}
		/* A full vector stops the walk early; go on from there. */
		if (walk_end <= at)
			return dead_or(c->pg, -EIO);
		at = walk_end;
	}
	return 0;
}

/* ---- /proc/PID/pagemap entries ---- */

static uint64_t self_pfn(int fd, const volatile char *p)
{
	uint64_t e;

	(void)*p;	/* a read fault */
	if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p >> KS_PAGE_SHIFT) * 8) != 8)
		return 0;
	return (e & PM_PRESENT) ? e & PM_PFN_MASK : 0;
}

/* The PFN a read fault maps at @p, when two such faults in distinct
 * mappings map the same one: the zero page. A kernel may allocate a page
 * per read fault instead (a PVM guest's, with pvm_no_zero_page): then 0,
 * and no PFN is mistaken for the zero page. */
static uint64_t shared_read_pfn(int fd, size_t len, size_t align, int advice)
{
	char *p[2] = { MAP_FAILED, MAP_FAILED }, *a;
	uint64_t pfn[2] = { 0, 0 };

	for (int i = 0; i < 2; i++) {
		p[i] = mmap(NULL, len + align, PROT_READ,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p[i] == MAP_FAILED)
			break;
		/* Up to the next @align boundary (a THP for the huge one). */
		a = p[i] + (align ? -(uintptr_t)p[i] & (align - 1) : 0);
		if (advice)
			madvise(a, len, advice);
		pfn[i] = self_pfn(fd, a);
	}
	for (int i = 0; i < 2; i++)
		if (p[i] != MAP_FAILED)
			munmap(p[i], len + align);
	return pfn[0] == pfn[1] ? pfn[0] : 0;
}

/* The PFNs of the zero page and of the huge zero page, from our own
 * memory: a read fault on untouched anonymous memory maps them. */
static void find_zero_pfns(struct classify *c)
{
	const size_t thp = 2u << 20;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	c->zero_pfn = shared_read_pfn(fd, KS_PAGE, 0, 0);
	c->huge_zero_pfn = shared_read_pfn(fd, thp, thp, MADV_HUGEPAGE);
	if (c->huge_zero_pfn == c->zero_pfn)
		c->huge_zero_pfn = 0;
	close(fd);
}

static bool is_zero_pfn(const struct classify *c, uint64_t pfn)
{
	if (c->zero_pfn && pfn == c->zero_pfn)
		return true;
	return c->huge_zero_pfn && pfn >= c->huge_zero_pfn &&
	       pfn < c->huge_zero_pfn + 512;
}

static bool pfn_huge(const struct classify *c, uint64_t pfn)
{
	uint64_t f;

	if (c->kpageflags < 0 || !pfn ||
	    pread(c->kpageflags, &f, sizeof(f), (off_t)(pfn * 8)) != 8)
		return false;
	return (f >> KPF_THP & 1) || (f >> KPF_HUGE & 1);
}

static int classify_read(struct classify *c, const struct kvmstats_ram_region *r,
			 struct ks_pg_region *pr, uint64_t *done)
{
	struct kvmstats_pagemap_counts *k = &c->pg->c;
	uint64_t block = UINT64_MAX;
	bool huge = false;

	for (uint64_t idx = 0; idx < pr->npages && !late(c); *done = idx) {
		uint64_t n = pr->npages - idx < READ_CHUNK ? pr->npages - idx : READ_CHUNK;
		off_t off = (off_t)(((r->start >> KS_PAGE_SHIFT) + idx) * 8);
		ssize_t got = pread(c->pagemap, c->buf, n * 8, off);

		if (got <= 0 || got % 8)
			return dead_or(c->pg, got < 0 ? -errno : -EIO);
		n = (uint64_t)got / 8;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t e = c->buf[i], pfn = e & PM_PFN_MASK;

			if (c->mapped && (e & (PM_PRESENT | PM_SWAPPED)))
				ks_set_bit(c->mapped, idx + i);
			if (!(e & PM_PRESENT)) {
				k->swapped += (e & PM_SWAPPED) != 0;
				continue;
			}
			k->present++;
			/* A 2 MiB page fills an aligned block of 512 PFNs: one
			 * kpageflags read answers for the whole block. */
			if (pfn >> 9 != block) {
				block = pfn >> 9;
				huge = pfn_huge(c, pfn);
			}
			k->huge += huge;
			if (is_zero_pfn(c, pfn))
				k->pfn_zero++;
			else
				ks_set_bit(pr->cand, idx + i);
		}
		idx += n;
	}
	return 0;
}

/* ---- shared memory: what the VMM does not map ---- */

/* Data pages of [first, first + n) not mapped by the VMM: cached ones
 * become candidates, others unknown. @mapped marks the pages the VMM
 * maps (present or swapped). */
static int file_data(struct classify *c, struct ks_pg_region *pr,
		     const uint64_t *mapped, int fd, uint64_t off0, uint64_t first,
		     uint64_t n)
{
	size_t len = (size_t)n << KS_PAGE_SHIFT;
	unsigned char *vec = malloc(n);
	void *map;
	int err = 0;

	if (!vec)
		return -ENOMEM;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd,
		   (off_t)(off0 + (first << KS_PAGE_SHIFT)));
	if (map == MAP_FAILED || mincore(map, len, vec)) {
		err = -errno;
		goto out;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (ks_bit(mapped, first + i))
			continue;
		if (vec[i] & 1) {
			c->pg->c.cached++;
			pr->cached++;
			ks_set_bit(pr->cand, first + i);
		} else {
			c->pg->c.swapped++;
		}
	}
out:
	if (map != MAP_FAILED)
		munmap(map, len);
	free(vec);
	return err;
}

static int classify_file(struct classify *c, const struct kvmstats_ram_region *r,
			 struct ks_pg_region *pr, const uint64_t *mapped)
{
	const uint64_t chunk = 1u << 16;	/* pages per mincore */
	uint64_t end = r->file_offset + r->len;
	off_t at = (off_t)r->file_offset;
	uint64_t first, last, next = 0;
	int fd = ks_region_open(c->pg->ram, r), err = 0;

	if (fd < 0) {
		/* Without the file (map_files needs CAP_SYS_ADMIN; a file system
		 * a process may stall is refused) what the VMM does not map is
		 * unknown, not zero. */
		unknown(c, mapped, 0, pr->npages, false);
		return fd == -ENOENT ? dead_or(c->pg, fd) : 0;
	}
	/* Pages from @next on are not counted yet: where the pass runs out
	 * of time, those the VMM does not map are unknown. */
	while (!err && (uint64_t)at < end && !late(c)) {
		off_t data = lseek(fd, at, SEEK_DATA), hole;

		if (data < 0 || (uint64_t)data >= end) {
			next = pr->npages;
			break;
		}
		hole = lseek(fd, data, SEEK_HOLE);
		/* A hole at or before the data would not move us on. */
		if (hole <= data || (uint64_t)hole > end)
			hole = (off_t)end;
		first = ((uint64_t)data - r->file_offset) >> KS_PAGE_SHIFT;
		last = ((uint64_t)hole - r->file_offset + KS_PAGE - 1) >> KS_PAGE_SHIFT;
		for (next = first; !err && next < last && !late(c); next += chunk)
			err = file_data(c, pr, mapped, fd, r->file_offset, next,
					last - next < chunk ? last - next : chunk);
		next = next < last ? next : last;
		at = hole;
	}
	if (!err && c->late && next < pr->npages)
		unknown(c, mapped, next, pr->npages, true);
	close(fd);
	return err;
}

/* ---- the object ---- */

static size_t words(uint64_t bits)
{
	return (size_t)((bits + 63) / 64);
}

static void build_rank(struct kvmstats_pages *pg)
{
	uint64_t first = 0;

	for (size_t i = 0; i < pg->n; i++) {
		struct ks_pg_region *pr = &pg->r[i];
		size_t nw = words(pr->npages);
		uint64_t sum = 0;

		for (size_t w = 0; w < nw; w++) {
			if (!(w % KS_RANK_WORDS))
				pr->rank[w / KS_RANK_WORDS] = sum;
			sum += (uint64_t)__builtin_popcountll(pr->cand[w]);
		}
		pr->ncand = sum;
		pr->first = first;
		first += sum;
	}
}

static int region_alloc(struct ks_pg_region *pr, uint64_t npages)
{
	size_t nw = words(npages);

	pr->npages = npages;
	pr->cand = calloc(nw ? nw : 1, sizeof(uint64_t));
	pr->rank = calloc(nw / KS_RANK_WORDS + 1, sizeof(uint64_t));
	return pr->cand && pr->rank ? 0 : -ENOMEM;
}

static bool shared_file(const struct kvmstats_ram_region *r)
{
	return r->shared && (r->kind == KVMSTATS_RAM_SHMEM || r->kind == KVMSTATS_RAM_FILE);
}

static int classify_region(struct classify *c, bool scan, size_t i)
{
	const struct kvmstats_ram_region *r = &c->pg->ram->r[i];
	struct ks_pg_region *pr = &c->pg->r[i];
	uint64_t *mapped = NULL, done = 0;
	int err;

	if (late(c)) {
		unknown(c, NULL, 0, pr->npages, true);
		return 0;
	}
	if (shared_file(r)) {
		mapped = calloc(words(pr->npages) ? words(pr->npages) : 1,
				sizeof(uint64_t));
		if (!mapped)
			return -ENOMEM;
	}
	/* Lent to the classifiers for this region only. */
	c->mapped = mapped;
	err = scan ? classify_scan(c, r, pr, &done) : classify_read(c, r, pr, &done);
	if (!err && done < pr->npages) {
		/* Late: what the VMM maps was not all looked at, so nor is its
		 * file; the pages classified so far stand. */
		unknown(c, NULL, done, pr->npages, true);
		if (mapped)
			unknown(c, mapped, 0, done, true);
	} else if (!err && mapped) {
		err = classify_file(c, r, pr, mapped);
	}
	c->mapped = NULL;
	free(mapped);
	return err;
}

static int classify_all(struct kvmstats_pages *pg, enum kvmstats_pagemap_mode mode,
			unsigned int timeout_ms)
{
	struct classify c = { .pg = pg, .kpageflags = -1 };
	bool scan = mode != KVMSTATS_PAGEMAP_READ;
	char path[64];
	int err = 0;

	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pg->ram->pid);
	c.pagemap = open(path, O_RDONLY | O_CLOEXEC);
	if (c.pagemap < 0)
		return dead_or(pg, -errno);
	c.buf = malloc(READ_CHUNK * sizeof(*c.buf));
	if (!c.buf) {
		close(c.pagemap);
		return -ENOMEM;
	}
	if (scan && mode == KVMSTATS_PAGEMAP_AUTO && !kvmstats_pagemap_scan_supported())
		scan = false;
	if (!scan) {
		find_zero_pfns(&c);
		c.kpageflags = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
	}
	pg->mode = scan ? "PAGEMAP_SCAN" : "pagemap";
	c.deadline = ks_now_ns() +
		     (uint64_t)(timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS) * 1000000;
	for (size_t i = 0; i < pg->n && !err; i++)
		err = classify_region(&c, scan, i);
	if (err == -ENOTTY || err == -EINVAL)
		err = -EOPNOTSUPP;
	if (c.kpageflags >= 0)
		close(c.kpageflags);
	free(c.buf);
	close(c.pagemap);
	return err;
}

struct kvmstats_pages *kvmstats_pages__classify(const struct kvmstats_ram *ram,
						const struct kvmstats_pages_opts *opts)
{
	struct kvmstats_pages_opts o;
	struct kvmstats_pages *pg;
	uint64_t t0 = ks_now_ns();
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || !ram) {
		errno = EINVAL;
		return NULL;
	}
	pg = calloc(1, sizeof(*pg));
	if (!pg)
		goto nomem;
	pg->ram = ram;
	pg->timeout_ms = o.timeout_ms;
	pg->n = ram->n;
	pg->r = calloc(ram->n ? ram->n : 1, sizeof(*pg->r));
	if (!pg->r)
		goto nomem;
	for (size_t i = 0; i < ram->n; i++) {
		if (region_alloc(&pg->r[i], ram->r[i].len >> KS_PAGE_SHIFT))
			goto nomem;
		pg->c.pages += pg->r[i].npages;
	}
	err = classify_all(pg, o.mode, o.timeout_ms);
	if (err)
		goto err;
	build_rank(pg);
	pg->c.candidates = pg->c.present - pg->c.pfn_zero + pg->c.cached;
	pg->c.none = pg->c.pages - pg->c.present - pg->c.swapped - pg->c.cached;
	pg->elapsed = ks_secs(ks_now_ns() - t0);
	return pg;
nomem:
	err = -ENOMEM;
err:
	kvmstats_pages__free(pg);
	errno = -err;
	return NULL;
}

void kvmstats_pages__free(struct kvmstats_pages *pg)
{
	if (!pg)
		return;
	for (size_t i = 0; pg->r && i < pg->n; i++) {
		free(pg->r[i].cand);
		free(pg->r[i].rank);
	}
	free(pg->r);
	free(pg);
}

const struct kvmstats_pagemap_counts *kvmstats_pages__counts(const struct kvmstats_pages *pg)
{
	return &pg->c;
}

const char *kvmstats_pages__mode(const struct kvmstats_pages *pg)
{
	return pg->mode;
}

double kvmstats_pages__elapsed(const struct kvmstats_pages *pg)
{
	return pg->elapsed;
}

const struct kvmstats_ram *kvmstats_pages__ram(const struct kvmstats_pages *pg)
{
	return pg->ram;
}

bool kvmstats_pages__candidate(const struct kvmstats_pages *pg, size_t region,
			       uint64_t page)
{
	if (region >= pg->n || page >= pg->r[region].npages)
		return false;
	return ks_bit(pg->r[region].cand, page);
}

/* ---- walking the candidates ---- */

static unsigned int select_bit(uint64_t w, uint64_t k)
{
	while (k--)
		w &= w - 1;
	return (unsigned int)__builtin_ctzll(w);
}

int ks_pages_nth(const struct kvmstats_pages *pg, uint64_t k, size_t *region,
		 uint64_t *page)
{
	for (size_t i = 0; i < pg->n; i++) {
		const struct ks_pg_region *pr = &pg->r[i];
		size_t lo = 0, hi = (words(pr->npages) - 1) / KS_RANK_WORDS, w;
		uint64_t left;

		if (!pr->ncand || k >= pr->first + pr->ncand)
			continue;
		left = k - pr->first;
		while (lo < hi) {	/* last block whose rank <= left */
			size_t mid = (lo + hi + 1) / 2;

			if (pr->rank[mid] <= left)
				lo = mid;
			else
				hi = mid - 1;
		}
		left -= pr->rank[lo];
		for (w = lo * KS_RANK_WORDS;; w++) {
			uint64_t c = (uint64_t)__builtin_popcountll(pr->cand[w]);

			if (left < c)
				break;
			left -= c;
		}
		*region = i;
		*page = w * 64 + select_bit(pr->cand[w], left);
		return *page < pr->npages ? 0 : -ERANGE;
	}
	return -ERANGE;
}

uint64_t ks_pages_next_run(const struct kvmstats_pages *pg, size_t region,
			   uint64_t *page, uint64_t end, uint64_t max)
{
	const struct ks_pg_region *pr = &pg->r[region];
	uint64_t i = *page, n = 0;

	if (end > pr->npages)
		end = pr->npages;
	while (i < end) {
		uint64_t w = pr->cand[i / 64] >> (i % 64);

		if (w) {
			i += (uint64_t)__builtin_ctzll(w);
			break;
		}
		i = (i / 64 + 1) * 64;
	}
	if (i >= end)
		return 0;
	*page = i;
	while (i + n < end && n < max && ks_bit(pr->cand, i + n))
		n++;
	return n;
}

/* ---- the pagemap estimator ---- */

int kvmstats_pages__estimate(const struct kvmstats_pages *pg,
			     struct kvmstats_estimate *e)
{
	const struct kvmstats_pagemap_counts *c = &pg->c;

	memset(e, 0, sizeof(*e));
	e->method = KVMSTATS_METHOD_PAGEMAP;
	e->valid = true;
	e->pages = c->pages;
	e->zero_pages = c->none + c->pfn_zero;
	e->nonzero_pages = c->candidates;
	e->unknown_pages = c->swapped;
	e->zero_lo = (double)e->zero_pages;
	e->zero_hi = (double)(e->zero_pages + c->candidates + c->swapped);
	e->coverage = c->pages ? (double)e->zero_pages / (double)c->pages : 1;
	e->elapsed_s = pg->elapsed;
	e->cpu_s = pg->elapsed;
	snprintf(e->note, sizeof(e->note), "%s: every present page counted as "
		 "non-zero (an upper bound)%s", pg->mode,
		 c->huge ? "; THP-backed pages inflate it" : "");
	ks_note_unclassified(e->note, sizeof(e->note), pg);
	return 0;
}
