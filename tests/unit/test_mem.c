// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The memory side on our own process: zero tests, region parsing, page
 * classification in both pagemap modes, the estimators, the dirty
 * sampler, the compression sample, QMP discovery against a fake QEMU
 * monitor (and a hung one), the migration model and the exporter's text.
 *
 * Our own memory stands in for a VMM's: its page states are set up
 * exactly (written, written with zeros, read-faulted to the zero page,
 * untouched, a memfd's page cache) so every count has a known answer.
 */
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"
#include "kvmstats_mem.h"
#include "../../lib/mem_internal.h"

#define PG 4096u
#define NPAGES 2048u	/* 8 MiB test region */

/* ---- zero tests ---- */

static void check_impl(enum kvmstats_zero_impl impl)
{
	static const size_t lens[] = { 1, 7, 8, 63, 64, 65, 127, 128, 129, 255,
				       256, 257, 1000, 4095, 4096, 8195 };
	kvmstats_zero_fn f = kvmstats_zero__get(impl);
	unsigned char *buf = calloc(1, 8192 + 64);

	assert_non_null(buf);
	if (!f) {
		assert_int_equal(errno, ENOTSUP);
		free(buf);
		return;
	}
	for (size_t off = 0; off < 3; off++) {
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			size_t len = lens[k];
			unsigned char *p = buf + off;

			assert_true(f(p, len));
			/* One set bit anywhere makes it non-zero; the bytes
			 * around the buffer never count. */
			for (size_t i = 0; i < len; i += len > 300 ? 37 : 1) {
				p[i] = 0x10;
				assert_false(f(p, len));
				p[i] = 0;
			}
			p[len - 1] = 1;
			assert_false(f(p, len));
			p[len - 1] = 0;
			p[len] = 0xff;
			if (off)
				p[-1] = 0xff;
			assert_true(f(p, len));
			p[len] = 0;
			if (off)
				p[-1] = 0;
		}
	}
	free(buf);
}

static void test_zero_variants(void **state)
{
	(void)state;
	for (int i = 0; i < KVMSTATS_ZERO_NR; i++)
		check_impl((enum kvmstats_zero_impl)i);
	assert_non_null(kvmstats_zero__get(KVMSTATS_ZERO_INT));
	assert_non_null(kvmstats_zero__get(KVMSTATS_ZERO_QEMU));
	assert_null(kvmstats_zero__get(KVMSTATS_ZERO_NR));
	assert_string_not_equal(kvmstats_zero__name(KVMSTATS_ZERO_BEST), "unknown");
}

/* ---- ranges ---- */

static void test_range_parse(void **state)
{
	struct kvmstats_range r;

	(void)state;
	assert_int_equal(kvmstats_range__parse("7f00a000-7f00c000", &r), 0);
	assert_true(r.start == 0x7f00a000 && r.end == 0x7f00c000);
	assert_int_equal(kvmstats_range__parse("0x1000-0x3000", &r), 0);
	assert_true(r.start == 0x1000 && r.end == 0x3000);
	assert_int_equal(kvmstats_range__parse("1000+4K", &r), 0);
	assert_true(r.end == 0x2000);
	assert_int_equal(kvmstats_range__parse("1000+2M", &r), 0);
	assert_true(r.end == 0x1000 + (2u << 20));
	assert_int_equal(kvmstats_range__parse("2000-1000", &r), -EINVAL);
	assert_int_equal(kvmstats_range__parse("1000-", &r), -EINVAL);
	assert_int_equal(kvmstats_range__parse("zz-1000", &r), -EINVAL);
	assert_int_equal(kvmstats_range__parse("1000+1X", &r), -EINVAL);
	assert_int_equal(kvmstats_range__parse("1000", &r), -EINVAL);
}

/* ---- classification of our own memory ---- */

/* Pages 0-9 hold data, 10-19 were written with zeros, 20-29 were only
 * read (mapped to the zero page, on kernels that have one for read
 * faults: see read_maps_zero_page()), the rest was never touched. */
static unsigned char *setup_region(void)
{
	unsigned char *m = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	volatile unsigned char sink = 0;

	assert_true(m != MAP_FAILED);
	madvise(m, NPAGES * PG, MADV_NOHUGEPAGE);
	for (unsigned int i = 0; i < 10; i++)
		m[i * PG + (i * 97) % PG] = (unsigned char)(i + 1);
	for (unsigned int i = 10; i < 20; i++)
		memset(m + i * PG, 0, PG);
	for (unsigned int i = 20; i < 30; i++)
		sink += m[i * PG];
	(void)sink;
	return m;
}

static struct kvmstats_ram *own_ram(void *start, size_t len)
{
	struct kvmstats_range r = { (uintptr_t)start, (uintptr_t)start + len };
	char err[256] = "";
	struct kvmstats_ram *ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .ranges = &r, .nranges = 1,
		.errbuf = err, .errbuf_sz = sizeof(err) });

	if (!ram)
		fail_msg("kvmstats_ram__open: %s", err);
	assert_int_equal(kvmstats_ram__how(ram), KVMSTATS_RAM_OVERRIDE);
	assert_int_equal(kvmstats_ram__count(ram), 1);
	assert_true(kvmstats_ram__bytes(ram) == len);
	return ram;
}

static struct kvmstats_pages *classify(struct kvmstats_ram *ram,
				       enum kvmstats_pagemap_mode mode)
{
	return kvmstats_pages__classify(ram, &(struct kvmstats_pages_opts){
		.sz = sizeof(struct kvmstats_pages_opts), .mode = mode });
}

static bool have_pfns(void)
{
	/* PFNs (and so the zero page) are visible to CAP_SYS_ADMIN only. */
	return geteuid() == 0;
}

/* Rss in kB of the mapping that starts at @m, from /proc/self/smaps. */
static long rss_kb(const void *m)
{
	unsigned long lo, hi;
	char line[256];
	FILE *f = fopen("/proc/self/smaps", "r");
	bool in = false;
	long kb = -1;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = lo == (uintptr_t)m;
		else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* Does a read fault map the shared zero page on this kernel? Most do; a
 * kernel may allocate a page instead (a PVM guest's, with
 * pvm_no_zero_page=1). Found out from the kernel, for any user: zero-page
 * mappings are not counted in a mapping's Rss, allocated pages are. */
static bool read_maps_zero_page(void)
{
	const unsigned int n = 16;
	volatile unsigned char *m = mmap(NULL, n * PG, PROT_READ,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long kb;

	assert_true(m != MAP_FAILED);
	madvise((void *)m, n * PG, MADV_NOHUGEPAGE);
	for (unsigned int i = 0; i < n; i++)
		(void)m[i * PG];
	kb = rss_kb((const void *)m);
	munmap((void *)m, n * PG);
	print_message("# read faults map %s (Rss %ld kB for %u pages read)\n",
		      kb == 0 ? "the zero page" : "a page each", kb, n);
	assert_true(kb == 0 || kb == n * PG / 1024);
	return kb == 0;
}

/* Pages only read (20-29) are candidates unless they map the zero page. */
static unsigned int read_candidates(void)
{
	return read_maps_zero_page() ? 0 : 10;
}

static void check_counts(const struct kvmstats_pagemap_counts *c, bool pfn_zero)
{
	unsigned int rc = read_candidates();

	assert_int_equal(c->pages, NPAGES);
	assert_int_equal(c->present, 30);
	assert_int_equal(c->swapped, 0);
	assert_int_equal(c->none, NPAGES - 30);
	if (pfn_zero) {
		assert_int_equal(c->pfn_zero, 10 - rc);
		assert_int_equal(c->candidates, 20 + rc);
	}
}

static void test_classify_modes(void **state)
{
	unsigned char *m = setup_region();
	struct kvmstats_ram *ram = own_ram(m, NPAGES * PG);
	struct kvmstats_pages *rd = classify(ram, KVMSTATS_PAGEMAP_READ), *sc;

	(void)state;
	assert_non_null(rd);
	assert_string_equal(kvmstats_pages__mode(rd), "pagemap");
	check_counts(kvmstats_pages__counts(rd), have_pfns());
	for (unsigned int i = 0; i < 20; i++)
		assert_true(kvmstats_pages__candidate(rd, 0, i) || !have_pfns());
	/* Without PFNs a zero-page mapping looks like any present page. */
	assert_int_equal(kvmstats_pages__candidate(rd, 0, 25),
			 have_pfns() ? read_candidates() > 0 : 1);
	assert_false(kvmstats_pages__candidate(rd, 0, 100));
	if (kvmstats_pagemap_scan_supported()) {
		sc = classify(ram, KVMSTATS_PAGEMAP_SCAN);
		assert_non_null(sc);
		assert_string_equal(kvmstats_pages__mode(sc), "PAGEMAP_SCAN");
		check_counts(kvmstats_pages__counts(sc), true);
		/* Without PFNs only PAGEMAP_SCAN tells zero-page mappings. */
		if (have_pfns())
			assert_memory_equal(kvmstats_pages__counts(sc),
					    kvmstats_pages__counts(rd),
					    sizeof(struct kvmstats_pagemap_counts));
		kvmstats_pages__free(sc);
	} else {
		assert_null(classify(ram, KVMSTATS_PAGEMAP_SCAN));
		assert_int_equal(errno, EOPNOTSUPP);
	}
	kvmstats_pages__free(rd);
	kvmstats_ram__free(ram);
	munmap(m, NPAGES * PG);
}

static void test_estimators(void **state)
{
	unsigned char *m = setup_region();
	struct kvmstats_ram *ram = own_ram(m, NPAGES * PG);
	struct kvmstats_pages *pg = classify(ram, KVMSTATS_PAGEMAP_AUTO), *after;
	struct kvmstats_estimate e;
	unsigned int rc;

	(void)state;
	assert_non_null(pg);
	if (!have_pfns() && !kvmstats_pagemap_scan_supported())
		skip();
	rc = read_candidates();
	assert_int_equal(kvmstats_pages__estimate(pg, &e), 0);
	assert_true(e.valid);
	assert_int_equal(e.nonzero_pages, 20 + rc);	/* an upper bound */
	assert_int_equal(e.zero_pages, NPAGES - 20 - rc);

	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_true(e.valid);
	assert_int_equal(e.nonzero_pages, 10);
	assert_int_equal(e.zero_pages, NPAGES - 10);
	assert_int_equal(e.unknown_pages, 0);
	assert_int_equal(e.tested, 20 + rc);
	assert_true(e.coverage == 1.0);

	/* A sample as large as the candidates is exact. */
	assert_int_equal(kvmstats_pages__sample(pg, &(struct kvmstats_sample_opts){
		.sz = sizeof(struct kvmstats_sample_opts), .seed = 7 }, &e), 0);
	assert_int_equal(e.nonzero_pages, 10);
	assert_true(e.zero_lo <= e.zero_pages && e.zero_pages <= e.zero_hi);

	/* Nothing was faulted in by reading. */
	after = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(after);
	assert_memory_equal(kvmstats_pages__counts(after), kvmstats_pages__counts(pg),
			    sizeof(struct kvmstats_pagemap_counts));
	for (unsigned int i = 0; i < 10; i++)
		assert_int_equal(m[i * PG + (i * 97) % PG], i + 1);
	kvmstats_pages__free(after);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, NPAGES * PG);
}

/* A sample smaller than the population: the interval must hold the
 * truth (half the candidates are zero). */
static void test_sample_interval(void **state)
{
	const unsigned int n = 16384;	/* 64 MiB */
	unsigned char *m = mmap(NULL, (size_t)n * PG, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_estimate e;

	(void)state;
	assert_true(m != MAP_FAILED);
	madvise(m, (size_t)n * PG, MADV_NOHUGEPAGE);
	for (unsigned int i = 0; i < n; i++)
		m[(size_t)i * PG + 5] = (unsigned char)(i & 1);	/* all present */
	ram = own_ram(m, (size_t)n * PG);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	assert_int_equal(kvmstats_pages__counts(pg)->candidates, n);
	assert_int_equal(kvmstats_pages__sample(pg, &(struct kvmstats_sample_opts){
		.sz = sizeof(struct kvmstats_sample_opts), .min_pages = 2000,
		.seed = 42 }, &e), 0);
	assert_int_equal(e.tested, 2000);
	assert_true(e.zero_lo <= n / 2 && n / 2 <= e.zero_hi);
	assert_true(e.zero_hi - e.zero_lo < n * 0.1);
	assert_true(fabs((double)e.zero_pages - n / 2) < n * 0.05);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, (size_t)n * PG);
}

/* THP: one written byte makes 512 pages present; only the scan knows
 * 511 of them are zero. Without a huge page (THP off, or none free at
 * fault time) the byte makes one page present: the scan must agree. */
static void test_thp(void **state)
{
	const size_t huge = 2u << 20;
	unsigned char *raw = mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *m;
	const struct kvmstats_pagemap_counts *c;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_estimate e;

	(void)state;
	assert_true(raw != MAP_FAILED);
	m = (unsigned char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
	madvise(m, huge, MADV_HUGEPAGE);
	m[12345] = 1;
	ram = own_ram(m, huge);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	c = kvmstats_pages__counts(pg);
	print_message("# THP: the write faulted in %s\n",
		      c->huge ? "a huge page" : "a small page");
	if (c->huge) {
		assert_int_equal(c->huge, 512);
		assert_int_equal(c->present, 512);
	} else {
		assert_int_equal(c->present, 1);
	}
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_int_equal(e.nonzero_pages, 1);
	assert_int_equal(e.zero_pages, 511);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(raw, 2 * huge);
}

/* Shared memory: pages written through the file (cached, not mapped),
 * pages written through the mapping, holes that must stay holes. */
static void test_shmem(void **state)
{
	const unsigned int n = 1024;
	unsigned char page[PG];
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_estimate e;
	struct stat st0, st1;
	unsigned char *m;
	int fd = memfd_create("kvmstats-test", MFD_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)n * PG), 0);
	memset(page, 0x5a, sizeof(page));
	for (unsigned int i = 0; i < 5; i++)
		assert_int_equal(pwrite(fd, page, PG, (off_t)i * PG), PG);
	memset(page, 0, sizeof(page));
	assert_int_equal(pwrite(fd, page, PG, 5 * PG), PG);	/* cached zero */
	m = mmap(NULL, (size_t)n * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	for (unsigned int i = 10; i < 15; i++)
		m[(size_t)i * PG + 1] = 7;
	ram = own_ram(m, (size_t)n * PG);
	assert_int_equal(kvmstats_ram__region(ram, 0)->kind, KVMSTATS_RAM_SHMEM);
	assert_true(kvmstats_ram__region(ram, 0)->shared);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	if (geteuid()) {
		kvmstats_pages__free(pg);
		kvmstats_ram__free(ram);
		skip();	/* map_files needs CAP_SYS_ADMIN */
	}
	assert_int_equal(kvmstats_pages__counts(pg)->present, 5);
	assert_int_equal(kvmstats_pages__counts(pg)->cached, 6);
	assert_int_equal(kvmstats_pages__counts(pg)->candidates, 11);
	assert_int_equal(kvmstats_pages__counts(pg)->none, n - 11);
	assert_int_equal(fstat(fd, &st0), 0);
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_int_equal(e.nonzero_pages, 10);
	assert_int_equal(e.zero_pages, n - 10);
	assert_int_equal(kvmstats_pages__sample(pg, NULL, &e), 0);
	assert_int_equal(e.nonzero_pages, 10);
	/* No hole was allocated by reading. */
	assert_int_equal(fstat(fd, &st1), 0);
	assert_int_equal(st0.st_blocks, st1.st_blocks);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, (size_t)n * PG);
	close(fd);
}

/* ---- file systems the planner reads ---- */

/* A btrfs image mounted on a directory of its own, with a subvolume:
 * root and btrfs-progs only (a loop device). */
struct btrfs_mnt {
	char dir[64];
	bool mounted;
};

static int btrfs_up(void **state)
{
	static struct btrfs_mnt b;
	char cmd[512];

	memset(&b, 0, sizeof(b));
	*state = &b;
	snprintf(b.dir, sizeof(b.dir), "/tmp/kvmstats-btrfs.XXXXXX");
	if (geteuid() || system("command -v mkfs.btrfs >/dev/null") || !mkdtemp(b.dir))
		return 0;
	snprintf(cmd, sizeof(cmd), "truncate -s 256M %s.img && mkfs.btrfs -q -f "
		 "%s.img >/dev/null 2>&1 && mount -o loop %s.img %s && btrfs -q "
		 "subvolume create %s/sub >/dev/null", b.dir, b.dir, b.dir, b.dir, b.dir);
	b.mounted = !system(cmd);
	return 0;
}

static int btrfs_down(void **state)
{
	struct btrfs_mnt *b = *state;
	char cmd[256];

	if (!b->dir[0] || strchr(b->dir, 'X'))
		return 0;
	snprintf(cmd, sizeof(cmd), "umount -l %s 2>/dev/null; rm -f %s.img; rmdir %s",
		 b->dir, b->dir, b->dir);
	return system(cmd) ? -1 : 0;
}

/* 16 MiB of @path mapped shared, 4 pages written through the mapping
 * and 8 more through the file only: every page is known. */
static void file_pages_known(const char *path)
{
	const size_t len = 16u << 20;
	const struct kvmstats_pagemap_counts *c;
	unsigned char page[PG], *m;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	memset(page, 0x5a, sizeof(page));
	for (unsigned int i = 100; i < 108; i++)
		assert_int_equal(pwrite(fd, page, PG, (off_t)i * PG), PG);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	for (unsigned int i = 0; i < 4; i++)
		m[(size_t)i * PG] = 7;
	ram = own_ram(m, len);
	assert_null(strstr(kvmstats_ram__region(ram, 0)->why, "not read"));
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	c = kvmstats_pages__counts(pg);
	assert_int_equal(c->present, 4);
	assert_int_equal(c->cached, 8);
	assert_int_equal(c->swapped, 0);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, len);
	close(fd);
	unlink(path);
}

/* btrfs is read, its subvolumes too: a file's device (statx) is its
 * subvolume's, which no mountinfo line names, even for the top volume
 * (0:42 where mountinfo says 0:41), so its mount is found by its ID.
 * Found by device, every btrfs file was refused and the pages the VMM
 * does not map were unknown (8 here). */
static void test_file_btrfs(void **state)
{
	const struct btrfs_mnt *b = *state;
	char path[96];

	if (!b->mounted)
		skip();	/* root, btrfs-progs and a loop device */
	snprintf(path, sizeof(path), "%s/ram", b->dir);
	file_pages_known(path);
	snprintf(path, sizeof(path), "%s/sub/ram", b->dir);
	file_pages_known(path);
}

/* A VMM that truncates its memfd under us: pages 0-99 written through
 * the mapping, 100-109 through the file (cached), then the file cut to
 * 50 pages. Reading must not fault (a load past the file's end is
 * SIGBUS) and the 60 pages gone are missing: unknown, never zero. */
static void test_shmem_truncated(void **state)
{
	const unsigned int n = 1024, keep = 50;
	unsigned char page[PG];
	struct kvmstats_dirty_result r;
	struct kvmstats_estimate e;
	struct kvmstats_dirty *d;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	unsigned char *m;
	int fd = memfd_create("kvmstats-test", MFD_CLOEXEC);

	(void)state;
	if (geteuid())
		skip();	/* map_files needs CAP_SYS_ADMIN */
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)n * PG), 0);
	m = mmap(NULL, (size_t)n * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	for (unsigned int i = 0; i < 100; i++)
		m[(size_t)i * PG + 3] = 9;
	memset(page, 0x5a, sizeof(page));
	for (unsigned int i = 100; i < 110; i++)
		assert_int_equal(pwrite(fd, page, PG, (off_t)i * PG), PG);
	ram = own_ram(m, (size_t)n * PG);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	assert_int_equal(kvmstats_pages__counts(pg)->candidates, 110);
	d = kvmstats_dirty__new(pg, &(struct kvmstats_dirty_opts){
		.sz = sizeof(struct kvmstats_dirty_opts), .seed = 5 });
	assert_non_null(d);

	assert_int_equal(ftruncate(fd, (off_t)keep * PG), 0);
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_int_equal(e.missing_pages, 110 - keep);
	assert_int_equal(e.nonzero_pages, keep);
	assert_int_equal(e.unknown_pages, 110 - keep);
	assert_int_equal(e.zero_pages, n - 110);
	assert_non_null(strstr(e.note, "60 present pages went missing"));
	assert_int_equal(kvmstats_pages__sample(pg, NULL, &e), 0);	/* all 110 */
	assert_int_equal(e.missing_pages, 110 - keep);
	assert_int_equal(e.nonzero_pages, keep);
	assert_int_equal(e.unknown_pages, 110 - keep);
	assert_int_equal(kvmstats_dirty__point(d), 0);
	assert_int_equal(kvmstats_dirty__result(d, &r), 0);
	assert_int_equal(r.sampled, 110);
	assert_int_equal(r.gone, 110 - keep);
	assert_int_equal(r.missing_pages, 110 - keep);
	assert_int_equal(r.points[0].changed, 0);

	/* All of it gone: nothing read, nothing zero that was a candidate. */
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_int_equal(e.missing_pages, 110);
	assert_int_equal(e.nonzero_pages, 0);
	assert_int_equal(e.bytes_read, 0);
	kvmstats_dirty__free(d);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, (size_t)n * PG);
	close(fd);
}

/* ---- a VMM's reservation as guest RAM ---- */

static double process_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Address space a VMM reserves costs it nothing (MAP_NORESERVE), and
 * the heuristic takes it for guest RAM. */
static unsigned char *reserve(size_t len)
{
	unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	madvise(m, len, MADV_NOHUGEPAGE);
	return m;
}

/* @len of reserved address space with a page written at each end, as
 * the RAM of a VMM; NULL where the space could not be reserved. */
static struct kvmstats_ram *reserve_ends(size_t len, unsigned char **m)
{
	*m = reserve(len);
	if (!*m)
		return NULL;
	(*m)[0] = 1;
	(*m)[len - PG] = 1;
	return own_ram(*m, len);
}

/* 256 GiB with one page of data, at its end: each of the scan's 65536
 * chunks looked for its next candidate up to the region's end, not its
 * own (7 s of CPU; quadratic: a TiB took two minutes). */
static void test_scan_sparse(void **state)
{
	const size_t len = 256ull << 30;
	unsigned char *m = reserve(len);
	struct kvmstats_estimate e;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	double cpu;

	(void)state;
	if (!m)
		skip();
	m[len - PG] = 1;
	ram = own_ram(m, len);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	assert_int_equal(kvmstats_pages__counts(pg)->candidates, 1);
	cpu = process_cpu();
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	cpu = process_cpu() - cpu;
	assert_int_equal(e.nonzero_pages, 1);
	if (cpu > 1.0)
		fail_msg("%.2f s of CPU to scan one page of 256 GiB", cpu);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, len);
}

/* 4 TiB with a page written at each end, one more once the baseline
 * is taken: a dirty point looked for new pages one page at a time, 2^30
 * of them. */
static void test_dirty_sparse(void **state)
{
	const size_t len = 4ull << 40;
	struct kvmstats_dirty_result r;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_dirty *d;
	unsigned char *m;
	double cpu;

	(void)state;
	ram = reserve_ends(len, &m);
	if (!ram)
		skip();
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	d = kvmstats_dirty__new(pg, &(struct kvmstats_dirty_opts){
		.sz = sizeof(struct kvmstats_dirty_opts), .seed = 7 });
	assert_non_null(d);
	m[len - 2 * PG] = 2;
	cpu = process_cpu();
	assert_int_equal(kvmstats_dirty__point(d), 0);
	cpu = process_cpu() - cpu;
	assert_int_equal(kvmstats_dirty__result(d, &r), 0);
	assert_int_equal(r.new_pages, 1);
	if (cpu > 0.5)	/* 0.11 s; 1.08 s a page at a time */
		fail_msg("%.2f s of CPU for a dirty point of 4 TiB", cpu);
	kvmstats_dirty__free(d);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, len);
}

/* A pass of 8-byte pagemap entries given 1 ms. */
static struct kvmstats_pages *classify_in_1ms(struct kvmstats_ram *ram)
{
	return kvmstats_pages__classify(ram, &(struct kvmstats_pages_opts){
		.sz = sizeof(struct kvmstats_pages_opts), .mode = KVMSTATS_PAGEMAP_READ,
		.timeout_ms = 1 });
}

/* The pass's time, against a VMM's address space: 2 TiB with a page
 * written at each end is 512 Mi pagemap entries (about 2 s); within 1 ms
 * the pass stops, and every page it did not reach is unknown, never
 * zero. The dirty rate, which tells new pages from the baseline's, is
 * refused for it. */
static void test_classify_late(void **state)
{
	const size_t len = 2ull << 40;
	const struct kvmstats_pagemap_counts *c;
	struct kvmstats_estimate e;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	unsigned char *m;
	double cpu;

	(void)state;
	ram = reserve_ends(len, &m);
	if (!ram)
		skip();
	cpu = process_cpu();
	pg = classify_in_1ms(ram);
	cpu = process_cpu() - cpu;
	assert_non_null(pg);
	c = kvmstats_pages__counts(pg);
	if (cpu > 0.5)	/* about 2 s read whole */
		fail_msg("%.2f s of CPU for a pass of 1 ms", cpu);
	assert_true(c->unclassified > 0 && c->unclassified < c->pages);
	assert_true(c->swapped >= c->unclassified);
	assert_true(c->present + c->swapped + c->cached + c->none == c->pages);
	assert_true(kvmstats_pages__candidate(pg, 0, 0));
	assert_false(kvmstats_pages__candidate(pg, 0, len / PG - 1));
	assert_int_equal(kvmstats_pages__scan(pg, NULL, &e), 0);
	assert_true(e.unknown_pages >= c->unclassified && e.nonzero_pages == 1);
	assert_non_null(strstr(e.note, "not classified within the pagemap pass's time"));
	assert_null(kvmstats_dirty__new(pg, &(struct kvmstats_dirty_opts){
		.sz = sizeof(struct kvmstats_dirty_opts), .seed = 7 }));
	assert_int_equal(errno, ETIME);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, len);
}

/* A memfd of 2 TiB the VMM maps whole and has not touched, two pages
 * of it written through the file: out of time, the file is not looked
 * at either, so no page is zero for want of being looked at. */
static void test_classify_late_file(void **state)
{
	const size_t len = 2ull << 40;
	const struct kvmstats_pagemap_counts *c;
	unsigned char page[PG], *m;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	int fd = memfd_create("kvmstats-test", MFD_CLOEXEC);

	(void)state;
	assert_true(fd >= 0);
	if (ftruncate(fd, (off_t)len)) {
		close(fd);
		skip();
	}
	memset(page, 0x5a, sizeof(page));
	assert_int_equal(pwrite(fd, page, PG, 0), PG);
	assert_int_equal(pwrite(fd, page, PG, (off_t)(len - PG)), PG);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	assert_true(m != MAP_FAILED);
	ram = own_ram(m, len);
	pg = classify_in_1ms(ram);
	assert_non_null(pg);
	c = kvmstats_pages__counts(pg);
	assert_int_equal(c->present, 0);
	assert_int_equal(c->cached, 0);
	assert_int_equal(c->none, 0);
	assert_true(c->swapped == c->pages && c->unclassified == c->pages);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, len);
	close(fd);
}

/* ---- dirty sampler ---- */

static void test_dirty(void **state)
{
	const unsigned int n = 1024;	/* all sampled: min_pages */
	unsigned char *m = mmap(NULL, (size_t)n * PG, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kvmstats_dirty_result r;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_dirty *d;

	(void)state;
	assert_true(m != MAP_FAILED);
	madvise(m, (size_t)n * PG, MADV_NOHUGEPAGE);
	for (unsigned int i = 0; i < n / 2; i++)
		m[(size_t)i * PG] = 1;
	ram = own_ram(m, (size_t)n * PG);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	d = kvmstats_dirty__new(pg, &(struct kvmstats_dirty_opts){
		.sz = sizeof(struct kvmstats_dirty_opts), .seed = 3 });
	assert_non_null(d);
	assert_int_equal(kvmstats_dirty__point(d), 0);	/* nothing changed */
	for (unsigned int i = 0; i < 100; i++)
		m[(size_t)i * PG + 9] = 2;		/* 100 rewritten */
	for (unsigned int i = n / 2; i < n / 2 + 30; i++)
		m[(size_t)i * PG] = 3;			/* 30 new pages */
	for (unsigned int i = n / 2 + 30; i < n / 2 + 40; i++)
		m[(size_t)i * PG] = 0;			/* 10 new, zero */
	assert_int_equal(kvmstats_dirty__point(d), 0);
	assert_int_equal(kvmstats_dirty__result(d, &r), 0);
	assert_int_equal(r.npoints, 2);
	assert_int_equal(r.sampled, n / 2);
	assert_int_equal(r.points[0].changed, 0);
	assert_true(r.points[0].pages == 0);
	assert_int_equal(r.points[1].changed, 100);
	assert_int_equal(r.new_pages, 40);
	assert_true(fabs(r.points[1].pages - 130) < 0.5);
	assert_true(r.points[1].lo <= 130 && r.points[1].hi >= 130);
	assert_true(r.pages_per_second > 0);
	kvmstats_dirty__free(d);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, (size_t)n * PG);
}

/* A sample of distinct pages, sorted, whatever its share of the
 * population: 16384 of 16497 took more than 64 rounds of drawing and
 * deduplicating (a plan failed with EAGAIN). */
static void test_pick_sorted(void **state)
{
	static const uint64_t cases[][2] = {
		{ 10, 100000 }, { 900, 1000 }, { 16384, 16497 }, { 999, 1000 },
		{ 1, 3 }, { 250, 1000 }, { 251, 1000 } };
	uint64_t *idx = calloc(16497, sizeof(*idx)), seed = 42;

	(void)state;
	assert_non_null(idx);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint64_t n = cases[c][0], total = cases[c][1];

		assert_int_equal(ks_pick_sorted(idx, n, total, &seed), 0);
		for (uint64_t i = 0; i < n; i++) {
			assert_true(idx[i] < total);
			assert_true(i == 0 || idx[i] > idx[i - 1]);
		}
	}
	free(idx);
}

/* The end of the first pass, walked back over our own memory: a big
 * region of 64 pages (0-39 data, 40-47 written zero, 48-55 never
 * touched, 56-63 data) and a small one of 16 pages of data, given small
 * first: QEMU sends the bigger block first, so the walk starts at the
 * small one's end. */
static void test_pages_tail(void **state)
{
	static const struct kvmstats_tail_point want[] = {
		{ 1, 1 }, { 2, 2 }, { 4, 4 }, { 8, 8 }, { 16, 16 }, { 32, 24 },
		{ 64, 48 }, { 80, 64 } };
	unsigned char *big = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *small = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kvmstats_range r[2];
	struct kvmstats_tail_point t[KVMSTATS_TAIL_POINTS];
	struct kvmstats_pages *pg;
	struct kvmstats_ram *ram;
	char err[256] = "";
	uint32_t n;

	(void)state;
	assert_true(big != MAP_FAILED && small != MAP_FAILED);
	madvise(big, 64 * PG, MADV_NOHUGEPAGE);
	madvise(small, 16 * PG, MADV_NOHUGEPAGE);
	for (unsigned int i = 0; i < 64; i++) {
		if (i < 40 || i >= 56)
			big[i * PG + 7] = (unsigned char)(i + 1);
		else if (i < 48)
			memset(big + i * PG, 0, PG);
	}
	for (unsigned int i = 0; i < 16; i++)
		small[i * PG + 100] = 9;
	r[0] = (struct kvmstats_range){ (uintptr_t)small, (uintptr_t)small + 16 * PG };
	r[1] = (struct kvmstats_range){ (uintptr_t)big, (uintptr_t)big + 64 * PG };
	ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .ranges = r, .nranges = 2,
		.errbuf = err, .errbuf_sz = sizeof(err) });
	if (!ram)
		fail_msg("kvmstats_ram__open: %s", err);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	assert_int_equal(ks_pages_tail(pg, 1000, t, &n), 0);
	assert_int_equal(n, 8);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(t[i].pages, want[i].pages);
		assert_true(fabs(t[i].normal - want[i].normal) < 1e-9);
	}
	/* Bounded: it stops at 20 pages, where the last point is. */
	assert_int_equal(ks_pages_tail(pg, 20, t, &n), 0);
	assert_int_equal(n, 6);
	assert_int_equal(t[5].pages, 20);
	assert_true(fabs(t[5].normal - 20) < 1e-9);	/* 16 + pages 60-63 */
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(big, 64 * PG);
	munmap(small, 16 * PG);
}

/* The compression sample over our own memory: the low half of 1024
 * pages compresses to almost nothing (a byte a page), the high half not
 * at all (random bytes). A sample cut short by its time bound after one
 * group must see both halves, as the whole sample does. */
static void check_compress(const struct kvmstats_pages *pg,
			   enum kvmstats_mig_compress m, double max_s,
			   uint64_t pages)
{
	struct kvmstats_compress_estimate e;

	assert_int_equal(ks_compress_sample(pg, m, 1, 7, 1024, max_s, &e), 0);
	assert_true(e.valid);
	assert_true(e.pages == pages);
	if (e.ratio < 0.35 || e.ratio > 0.65)
		fail_msg("%s: %" PRIu64 " pages compress to %.3f, not about 0.5",
			 kvmstats_mig_compress_str(m), e.pages, e.ratio);
}

static void test_compress_sample(void **state)
{
	const size_t n = 1024;
	unsigned char *m = mmap(NULL, n * PG, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	uint64_t x = 88172645463325252ull;

	(void)state;
	assert_true(m != MAP_FAILED);
	madvise(m, n * PG, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < n / 2; i++)
		m[i * PG + i % PG] = 1;
	for (size_t i = n / 2 * PG; i < n * PG; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;	/* xorshift64 */
		memcpy(m + i, &x, 8);
	}
	ram = own_ram(m, n * PG);
	pg = classify(ram, KVMSTATS_PAGEMAP_AUTO);
	assert_non_null(pg);
	assert_true(kvmstats_pages__counts(pg)->candidates == n);
	check_compress(pg, KVMSTATS_MIG_COMPRESS_ZLIB, 60, n);
	check_compress(pg, KVMSTATS_MIG_COMPRESS_ZSTD, 60, n);
	/* A bound of 0 s: one group of 128, then time is up. */
	check_compress(pg, KVMSTATS_MIG_COMPRESS_ZLIB, 0, 128);
	check_compress(pg, KVMSTATS_MIG_COMPRESS_ZSTD, 0, 128);
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
	munmap(m, n * PG);
}

/* ---- a fake QEMU monitor ---- */

struct fake_qmp {
	char path[108];
	int lfd;
	bool hang;		/* accept, then never answer */
	char ramblock[512];
	const char *blocks;	/* a longer ramblock text, when set */
	pthread_t tid;
};

/* MSG_NOSIGNAL: the client may hang up before a reply (the library closes
 * the monitor once it has what it asked for); that must not SIGPIPE the
 * test. */
static void say(int fd, const char *s)
{
	if (send(fd, s, strlen(s), MSG_NOSIGNAL) < 0)
		return;	/* the client left: fine */
}

static void *fake_main(void *arg)
{
	struct fake_qmp *f = arg;
	char buf[4096], reply[1024];
	int fd = accept(f->lfd, NULL, NULL);
	ssize_t n;

	if (fd < 0)
		return NULL;
	if (f->hang) {
		struct pollfd p = { fd, POLLIN, 0 };

		poll(&p, 1, 3000);
		close(fd);
		return NULL;
	}
	say(fd, "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n");
	while ((n = read(fd, buf, sizeof(buf) - 1)) > 0) {
		const char *id;
		long long v = 0;

		buf[n] = 0;
		/* QEMU's replies carry the command's "id". */
		id = strstr(buf, "\"id\"");
		if (id && sscanf(id + 4, " :%lld", &v) != 1)
			v = 0;
		if (strstr(buf, "qmp_capabilities")) {
			snprintf(reply, sizeof(reply), "{\"event\": \"NOISE\"}\r\n"
				 "{\"return\": {}, \"id\": %lld}\r\n", v);
		} else if (strstr(buf, "x-query-ramblock") && f->blocks) {
			say(fd, "{\"return\": {\"human-readable-text\": \"");
			say(fd, f->blocks);
			snprintf(reply, sizeof(reply), "\"}, \"id\": %lld}\r\n", v);
		} else if (strstr(buf, "x-query-ramblock")) {
			snprintf(reply, sizeof(reply),
				 "{\"return\": {\"human-readable-text\": \"%s\"}, "
				 "\"id\": %lld}\r\n", f->ramblock, v);
		} else if (strstr(buf, "query-migrate-parameters")) {
			snprintf(reply, sizeof(reply), "{\"return\": {\"max-bandwidth\": "
				 "1048576, \"downtime-limit\": 123}, \"id\": %lld}\r\n", v);
		} else {
			snprintf(reply, sizeof(reply), "{\"error\": {\"class\": "
				 "\"CommandNotFound\"}, \"id\": %lld}\r\n", v);
		}
		say(fd, reply);
	}
	close(fd);
	return NULL;
}

static void fake_start(struct fake_qmp *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(f->path, sizeof(f->path), "/tmp/kvmstats-qmp-%d-%d", (int)getpid(),
		 f->hang);
	unlink(f->path);
	strcpy(sa.sun_path, f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(pthread_create(&f->tid, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake_qmp *f)
{
	pthread_join(f->tid, NULL);
	close(f->lfd);
	unlink(f->path);
}

/* A "RAM block" laid out as QEMU does: 2 MiB aligned, exactly its total
 * size, a PROT_NONE guard page after it. */
static unsigned char *qemu_like_block(size_t size, void **raw, size_t *rawlen)
{
	const size_t align = 2u << 20;
	unsigned char *m;

	*rawlen = size + 2 * align;
	*raw = mmap(NULL, *rawlen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(*raw != MAP_FAILED);
	m = (unsigned char *)(((uintptr_t)*raw + align - 1) & ~(uintptr_t)(align - 1));
	assert_int_equal(mprotect(m, size, PROT_READ | PROT_WRITE), 0);
	madvise(m, size, MADV_DONTFORK);
	return m;
}

static void test_qmp_blocks(void **state)
{
	struct fake_qmp f = { .hang = false };
	const size_t total = 6u << 20;	/* an odd size no other mapping has */
	char err[256] = "";
	struct kvmstats_ram *ram;
	const struct kvmstats_ram_region *r;
	size_t rawlen;
	void *raw;
	unsigned char *m = qemu_like_block(total, &raw, &rawlen);

	(void)state;
	snprintf(f.ramblock, sizeof(f.ramblock),
		 "              Block Name    PSize              Offset"
		 "               Used              Total\\r\\n"
		 "              test.ram    4 KiB  0x0000000000000000 "
		 "0x0000000000400000 0x%016zx\\r\\n", total);
	fake_start(&f);
	ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .qmp_path = f.path,
		.errbuf = err, .errbuf_sz = sizeof(err) });
	if (!ram)
		fail_msg("open: %s", err);
	assert_int_equal(kvmstats_ram__how(ram), KVMSTATS_RAM_QMP);
	assert_int_equal(kvmstats_ram__count(ram), 1);
	r = kvmstats_ram__region(ram, 0);
	assert_true(r->start == (uintptr_t)m);
	assert_true(r->len == 4u << 20);	/* used, not total */
	assert_string_equal(r->name, "test.ram");
	assert_non_null(strstr(r->why, "guard page"));
	assert_true(kvmstats_ram__max_bandwidth(ram) == 1048576);
	assert_int_equal(kvmstats_ram__downtime_ms(ram), 123);
	assert_string_equal(kvmstats_ram__qmp_path(ram), f.path);
	kvmstats_ram__free(ram);
	fake_stop(&f);
	munmap(raw, rawlen);
}

/* A monitor that names tens of thousands of RAM blocks, beside as many
 * mappings: each block was matched against every mapping (30,000 blocks
 * and 20,000 mappings, 3 s of CPU). More than QEMU ever has are refused,
 * and the heuristic is used. */
static void test_qmp_many_blocks(void **state)
{
	const size_t nmaps = 20000, nblocks = 30000, total = 6u << 20;
	const char *line = "x 4 KiB 0x0 0x1000 0x3000\\n";
	struct fake_qmp f = { .hang = false };
	char err[256] = "", *text, *p;
	struct kvmstats_ram *ram;
	size_t rawlen, len;
	unsigned char *many;
	double cpu;
	void *raw;

	(void)state;
	qemu_like_block(total, &raw, &rawlen);
	/* Mappings that do not merge: every other page read-only. */
	many = mmap(NULL, nmaps * 2 * PG, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	assert_true(many != MAP_FAILED);
	for (size_t i = 0; i < nmaps; i++)
		assert_int_equal(mprotect(many + (2 * i + 1) * PG, PG, PROT_READ), 0);
	len = strlen(line);
	text = malloc(256 + nblocks * len);
	assert_non_null(text);
	p = text + sprintf(text, "              Block Name    PSize    Offset    Used"
			   "    Total\\n              test.ram    4 KiB  0x0 0x400000 "
			   "0x%zx\\n", total);
	for (size_t i = 0; i < nblocks; i++, p += len)
		memcpy(p, line, len + 1);
	f.blocks = text;
	fake_start(&f);
	cpu = ks_thread_cpu();
	ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .qmp_path = f.path,
		.errbuf = err, .errbuf_sz = sizeof(err) });
	cpu = ks_thread_cpu() - cpu;
	if (!ram)
		fail_msg("open: %s", err);
	assert_int_equal(kvmstats_ram__how(ram), KVMSTATS_RAM_HEURISTIC);
	assert_non_null(strstr(kvmstats_ram__note(ram), "more than 1024 RAM blocks"));
	if (cpu > 1.0)
		fail_msg("%.2f s of CPU to refuse %zu RAM blocks", cpu, nblocks);
	kvmstats_ram__free(ram);
	fake_stop(&f);
	free(text);
	munmap(many, nmaps * 2 * PG);
	munmap(raw, rawlen);
}

/* A monitor that never answers costs the timeout, then the heuristic. */
static void test_qmp_hung(void **state)
{
	struct fake_qmp f = { .hang = true };
	struct kvmstats_ram *ram;
	uint64_t t0;
	struct timespec ts;
	size_t rawlen;
	void *raw;

	(void)state;
	qemu_like_block(6u << 20, &raw, &rawlen);
	fake_start(&f);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .qmp_path = f.path,
		.timeout_ms = 300 });
	clock_gettime(CLOCK_MONOTONIC, &ts);
	assert_true((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - t0 < 2000);
	assert_non_null(ram);
	assert_int_equal(kvmstats_ram__how(ram), KVMSTATS_RAM_HEURISTIC);
	assert_non_null(strstr(kvmstats_ram__note(ram), "no answer"));
	/* The heuristic found our DONTFORK block among the regions. */
	assert_true(kvmstats_ram__count(ram) >= 1);
	kvmstats_ram__free(ram);
	fake_stop(&f);
	munmap(raw, rawlen);
}

static void test_bad_range(void **state)
{
	struct kvmstats_range r = { 0x1000, 0x2000 };	/* never mapped */
	char err[256] = "";

	(void)state;
	assert_null(kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .ranges = &r, .nranges = 1,
		.errbuf = err, .errbuf_sz = sizeof(err) }));
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(err, "read-write"));
	assert_null(kvmstats_ram__open(0, NULL));
}

/* A process whose main thread has exited while another runs on: its
 * pidfd says alive, its task flags say exiting, as a VMM's do between
 * dropping its memory and closing its files. */
static void *linger(void *arg)
{
	(void)arg;
	sleep(30);
	return NULL;
}

static void test_vmm_gone(void **state)
{
	int pipefd[2], pidfd;
	pid_t child;
	char c;

	(void)state;
	pidfd = ks_pidfd_open(getpid());
	assert_true(pidfd >= 0);
	assert_false(ks_vmm_gone(pidfd, getpid()));
	close(pidfd);
	assert_int_equal(pipe(pipefd), 0);
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		pthread_t t;

		pthread_create(&t, NULL, linger, NULL);
		close(pipefd[0]);
		close(pipefd[1]);	/* the parent's read ends: started */
		pthread_exit(NULL);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 0);
	close(pipefd[0]);
	pidfd = ks_pidfd_open(child);
	assert_true(pidfd >= 0);
	/* The main thread's exit is under way: wait for its flag, bounded. */
	for (int i = 0; i < 200 && !ks_vmm_gone(pidfd, child); i++)
		usleep(10000);
	assert_true(ks_pidfd_alive(pidfd));
	assert_true(ks_vmm_gone(pidfd, child));
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_true(ks_vmm_gone(pidfd, child));
	close(pidfd);
}

/* A VMM's CPU time, read after the last ')' of /proc/PID/stat: a child
 * named like the fields that follow its name, and that burnt 0.2 s of
 * CPU, reads as that (clock ticks), not as what its name says. */
static void test_proc_cpu_ns(void **state)
{
	int pipefd[2], err;
	uint64_t ns = 0;
	pid_t child;
	char c;

	(void)state;
	assert_int_equal(pipe(pipefd), 0);
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		struct timespec t = { 0, 0 };

		prctl(PR_SET_NAME, ") R 9 9 9 9 9 9");
		while (t.tv_sec == 0 && t.tv_nsec < 200000000)
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
		close(pipefd[0]);
		close(pipefd[1]);	/* the parent's read ends: burnt */
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &c, 1), 0);
	close(pipefd[0]);
	err = ks_proc_cpu_ns(child, &ns);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_int_equal(err, 0);
	assert_true(ns >= 150000000ull && ns < 5000000000ull);
	assert_true(ks_proc_cpu_ns(child, &ns) < 0);
}

/* ---- the model ---- */

static void test_model_clean(void **state)
{
	struct kvmstats_migrate_prediction p;

	(void)state;
	assert_int_equal(kvmstats_migrate__predict(&(struct kvmstats_migrate_input){
		.sz = sizeof(struct kvmstats_migrate_input), .zero_pages = 1000,
		.nonzero_pages = 100, .nblocks = 1, .block_name_bytes = 6,
		.bandwidth = 1e6 }, &p), 0);
	assert_true(p.converges);
	assert_true(p.assumed_clean);
	assert_int_equal(p.passes, 2);
	/* 1000 x 9 + 100 x 4104 + id (1 + 6) + EOS, then a final EOS. */
	assert_int_equal(p.first_pass_bytes, 9000 + 410400 + 7 + 8);
	assert_int_equal(p.bytes, 9000 + 410400 + 7 + 8 + 8);
	assert_true(fabs(p.seconds - (double)p.bytes / 1e6) < 1e-9);
}

static void test_model_dirty(void **state)
{
	/* 1000 pages dirtied per second, steadily. */
	struct kvmstats_dirty_point c[2] = { { .t = 0.5, .pages = 500 },
					     { .t = 1, .pages = 1000 } };
	struct kvmstats_migrate_prediction p;
	struct kvmstats_migrate_input in = {
		.sz = sizeof(in), .zero_pages = 0, .nonzero_pages = 100000,
		.curve = c, .npoints = 2, .bandwidth = 100e6, .downtime_s = 0.3,
	};

	(void)state;
	assert_true(fabs(kvmstats_dirty_curve_at(c, 2, 0.25, 1e9) - 250) < 1e-9);
	assert_true(fabs(kvmstats_dirty_curve_at(c, 2, 2, 1e9) - 2000) < 1e-9);
	assert_true(fabs(kvmstats_dirty_curve_at(c, 2, 2, 1500) - 1500) < 1e-9);
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	/* 410 MB at 100 MB/s. QEMU syncs the bitmap once fewer than the 30 MB
	 * threshold's 7324 pages are left, read once a 100 ms window (2437
	 * pages): 6106 pages still pending on average. Sent by then: 3.85 s,
	 * 3853 pages dirtied, 3618 of them not on those: 9724 pending, over
	 * the threshold. After one window 7287 are left, and 93 dirtied:
	 * 7380, just over. After one more, 4943 and 95: 5039, stop and copy.
	 */
	assert_true(p.converges);
	assert_int_equal(p.passes, 4);
	assert_true(p.final_bytes > 5000 * 4104 && p.final_bytes < 5080 * 4104);
	/* Dirtying faster than the link: never converges. */
	c[0].pages = 500000;
	c[1].pages = 1000000;
	in.curve = c;
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	assert_false(p.converges);
	assert_non_null(strstr(p.note, "does not converge"));
}

/* ---- the exporter's text ---- */

static void test_prometheus(void **state)
{
	struct kvmstats_plan_vm a = { .pid = 10, .name = "we\"ird\\name",
				      .memory_bytes = 1 << 20, .pages = 256,
				      .method = KVMSTATS_METHOD_SCAN, .predicted = true };
	struct kvmstats_plan_vm b = a, bad = a;
	const struct kvmstats_plan_vm *v[3] = { &a, &b, &bad };
	char buf[8192], small[64];
	int n;

	(void)state;
	a.est[KVMSTATS_METHOD_SCAN] = (struct kvmstats_estimate){
		.valid = true, .pages = 256, .zero_pages = 192, .nonzero_pages = 64 };
	a.pred.seconds = 2;
	a.pred.converges = true;
	b.pid = 11;
	b.est[KVMSTATS_METHOD_SCAN] = a.est[KVMSTATS_METHOD_SCAN];
	b.pred.seconds = 1;
	b.pred.converges = true;
	bad.pid = 12;
	bad.error = -ESRCH;
	n = kvmstats_plan__prometheus(v, 3, buf, sizeof(buf));
	assert_true(n > 0 && n < (int)sizeof(buf));
	assert_non_null(strstr(buf, "# TYPE kvmstats_plan_zero_pages gauge\n"));
	assert_non_null(strstr(buf, "kvmstats_plan_zero_pages{pid=\"10\",name=\"we\\\"ird\\\\name\","
				    "method=\"scan\"} 192\n"));
	assert_non_null(strstr(buf, "kvmstats_plan_zero_ratio{pid=\"10\""));
	assert_non_null(strstr(buf, "kvmstats_plan_rank{pid=\"11\",name=\"we\\\"ird\\\\name\","
				    "method=\"scan\"} 1\n"));
	assert_non_null(strstr(buf, "kvmstats_plan_rank{pid=\"10\""));
	assert_null(strstr(buf, "pid=\"12\""));
	/* A rate not measured (a clean guest assumed) is absent, not 0. */
	assert_null(strstr(buf, "kvmstats_plan_dirty_pages_per_second{"));
	b.dirty_measured = true;
	b.dirty.pages_per_second = 250;
	n = kvmstats_plan__prometheus(v, 3, buf, sizeof(buf));
	assert_true(n > 0 && n < (int)sizeof(buf));
	assert_null(strstr(buf, "kvmstats_plan_dirty_pages_per_second{pid=\"10\""));
	assert_non_null(strstr(buf, "kvmstats_plan_dirty_pages_per_second{pid=\"11\","
				    "name=\"we\\\"ird\\\\name\",method=\"scan\"} 250\n"));
	/* A point prediction that does not converge: its bytes and seconds
	 * are the model's give-up figures, no sample, never a number. */
	a.pred.converges = false;
	a.pred.verdict = KVMSTATS_VERDICT_NO;
	a.pred.bytes = 1400000000;
	a.pred.seconds = 170;
	n = kvmstats_plan__prometheus(v, 3, buf, sizeof(buf));
	assert_true(n > 0 && n < (int)sizeof(buf));
	assert_null(strstr(buf, "kvmstats_plan_predicted_seconds{pid=\"10\""));
	assert_null(strstr(
		buf, "kvmstats_plan_predicted_transfer_bytes{pid=\"10\""));
	assert_null(strstr(buf, "170"));
	assert_non_null(
		strstr(buf, "kvmstats_plan_predicted_seconds{pid=\"11\","
			    "name=\"we\\\"ird\\\\name\",method=\"scan\"} 1\n"));
	assert_non_null(
		strstr(buf, "kvmstats_plan_converges{pid=\"10\","
			    "name=\"we\\\"ird\\\\name\",method=\"scan\"} 0\n"));
	assert_non_null(
		strstr(buf, "kvmstats_plan_rank{pid=\"10\","
			    "name=\"we\\\"ird\\\\name\",method=\"scan\"} 2\n"));
	/* snprintf semantics: truncated, terminated, full length returned. */
	assert_int_equal(kvmstats_plan__prometheus(v, 3, small, sizeof(small)), n);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_int_equal(kvmstats_plan__prometheus(v, 3, NULL, 0), n);
}

static double gauge_of(const struct kvmstats_plan_vm *v, int g)
{
	return kvmstats_plan_vm__gauge(v, (enum kvmstats_plan_gauge)g, 4);
}

/* The gauges one by one: named, and absent (NAN) where not measured. */
static void test_plan_gauges(void **state)
{
	struct kvmstats_plan_vm v = {.method = KVMSTATS_METHOD_SCAN,
				     .missing_pages = 3};

	(void)state;
	for (int g = 0; g < KVMSTATS_PLAN_GAUGE_NR; g++)
		assert_non_null(strstr(kvmstats_plan_gauge_str(g), "_plan_"));
	assert_string_equal(kvmstats_plan_gauge_str(KVMSTATS_PLAN_GAUGE_NR),
			    "unknown");
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_RATIO)));
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_DIRTY)));
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_POSTCOPY)));
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_NR)));
	v.est[KVMSTATS_METHOD_SCAN].pages = 256;
	v.est[KVMSTATS_METHOD_SCAN].zero_pages = 192;
	v.dirty_measured = true;
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_RATIO) == 0.75);
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_DIRTY) == 0);
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_MISSING) == 3);
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_RANK) == 4);
	v.pred.verdict = KVMSTATS_VERDICT_UNCERTAIN;
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_CONVERGES)));
	v.pred.verdict = KVMSTATS_VERDICT_CONVERGES;
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_CONVERGES) == 1);
	/* The point bytes and seconds only where the point converges. */
	v.pred.bytes = 1400000000;
	v.pred.seconds = 170;
	v.pred.converges = false;
	v.pred.verdict = KVMSTATS_VERDICT_UNCERTAIN;
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_BYTES)));
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_SECONDS)));
	v.pred.verdict = KVMSTATS_VERDICT_NO;
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_BYTES)));
	assert_true(isnan(gauge_of(&v, KVMSTATS_PLAN_GAUGE_SECONDS)));
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_CONVERGES) == 0);
	v.pred.converges = true;
	v.pred.verdict = KVMSTATS_VERDICT_CONVERGES;
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_BYTES) == 1400000000);
	assert_true(gauge_of(&v, KVMSTATS_PLAN_GAUGE_SECONDS) == 170);
}

static void test_methods(void **state)
{
	(void)state;
	for (int i = 0; i < KVMSTATS_METHOD_NR; i++)
		assert_int_equal(kvmstats_method_parse(kvmstats_method_str(i)), i);
	assert_int_equal(kvmstats_method_parse("bogus"), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_variants),
		cmocka_unit_test(test_range_parse),
		cmocka_unit_test(test_classify_modes),
		cmocka_unit_test(test_estimators),
		cmocka_unit_test(test_sample_interval),
		cmocka_unit_test(test_thp),
		cmocka_unit_test(test_shmem),
		cmocka_unit_test(test_shmem_truncated),
		cmocka_unit_test(test_scan_sparse),
		cmocka_unit_test(test_dirty_sparse),
		cmocka_unit_test(test_classify_late),
		cmocka_unit_test(test_classify_late_file),
		cmocka_unit_test_setup_teardown(test_file_btrfs, btrfs_up, btrfs_down),
		cmocka_unit_test(test_dirty),
		cmocka_unit_test(test_compress_sample),
		cmocka_unit_test(test_qmp_blocks),
		cmocka_unit_test(test_qmp_hung),
		cmocka_unit_test(test_qmp_many_blocks),
		cmocka_unit_test(test_bad_range),
		cmocka_unit_test(test_vmm_gone),
		cmocka_unit_test(test_pick_sorted),
		cmocka_unit_test(test_pages_tail),
		cmocka_unit_test(test_proc_cpu_ns),
		cmocka_unit_test(test_model_clean),
		cmocka_unit_test(test_model_dirty),
		cmocka_unit_test(test_prometheus),
		cmocka_unit_test(test_plan_gauges),
		cmocka_unit_test(test_methods),
	};

	return cmocka_run_group_tests_name("mem", tests, NULL, NULL);
}
