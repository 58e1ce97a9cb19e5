// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Reading guest pages without a fault: the view the sample, the scan and
 * the dirty sampler read through.
 *
 * Anonymous (and private) RAM is copied out of the VMM with
 * process_vm_readv: a page whose mapping vanished makes the call stop
 * short, never a signal.
 *
 * Shared RAM (memfd, shm, files) is read with pread on the VMM's file,
 * opened through /proc/PID/map_files: the VMM may truncate that file or
 * punch holes in it at any time (a balloon, a VMM that refills its RAM),
 * and a load from a mapping of it past its end raises SIGBUS in our
 * process. A library cannot take that signal (a handler is process-wide
 * state its caller owns); pread past the end just returns short. The copy
 * goes into a buffer the caller allocated at open time, small enough to
 * stay in cache, so its cost is a pass over cached memory, and it saves
 * the page faults a fresh mapping of the file took on every first read.
 *
 * We still map the file, read-only, but never load from that mapping:
 * mincore() on it says which pages are in memory. It is asked before the
 * read, so that a page swapped out or evicted meanwhile is not read
 * back in (pread would), and after it: a page that was not there at
 * either instant went missing while we looked (the VMM took it away; a
 * hole reads as zeros, which it is not known to hold). Such pages are
 * unknown, and counted as missing by the callers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mem_internal.h"

#define MAX_IOV 1024u	/* IOV_MAX */
#define VEC_PAGES 256u	/* mincore bytes on the stack of ks_view_fetch */

long ks_read_pages(pid_t pid, const uint64_t *addr, size_t n, void *buf, bool *ok)
{
	struct iovec remote[MAX_IOV], local;
	size_t i = 0;
	long good = 0;

	while (i < n) {
		size_t first = i, niov = 0;
		ssize_t got;

		/* Merge neighbours; stop at IOV_MAX iovecs. */
		while (i < n && (niov < MAX_IOV || addr[i] == addr[i - 1] + KS_PAGE)) {
			if (niov && addr[i] == addr[i - 1] + KS_PAGE && i > first) {
				remote[niov - 1].iov_len += KS_PAGE;
			} else {
				remote[niov].iov_base = (void *)(uintptr_t)addr[i];
				remote[niov++].iov_len = KS_PAGE;
			}
			i++;
		}
		local.iov_base = (unsigned char *)buf + first * KS_PAGE;
		local.iov_len = (i - first) * KS_PAGE;
		got = process_vm_readv(pid, &local, 1, remote, niov, 0);
		if (got < 0 && errno == ESRCH)
			return -ESRCH;
		got = got < 0 ? 0 : got / KS_PAGE;
		for (size_t k = first; k < first + (size_t)got; k++)
			ok[k] = true;
		good += got;
		if (first + (size_t)got < i) {
			/* The page after the last good one failed: skip it and
			 * go on from the next. */
			ok[first + (size_t)got] = false;
			i = first + (size_t)got + 1;
		}
	}
	return good;
}

/* Shared memory and files are read from the file. Not hugetlbfs:
 * mincore() there only sees our own page tables, so it cannot tell a
 * hole, and the VMM maps every hugetlb page the guest touched anyway:
 * those are read through process_vm_readv like anonymous memory. */
static bool from_file(const struct kvmstats_ram_region *r)
{
	return r->shared && (r->kind == KVMSTATS_RAM_SHMEM || r->kind == KVMSTATS_RAM_FILE);
}

static int view_region(struct ks_view *v, size_t i)
{
	const struct kvmstats_ram_region *r = &v->pg->ram->r[i];
	uint64_t ps = r->page_size ? r->page_size : KS_PAGE;
	size_t len = (size_t)((r->len + ps - 1) / ps * ps);
	void *m;
	int fd;

	/* Without the file, pages the VMM maps could be read through
	 * process_vm_readv, but cached pages it does not map would be
	 * faulted in: then the region is not read at all. */
	v->blind[i] = v->pg->r[i].cached != 0;
	fd = ks_region_open(v->pg->ram, r);
	if (fd < 0)
		return 0;
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)r->file_offset);
	if (m == MAP_FAILED) {
		close(fd);
		return 0;
	}
	v->blind[i] = false;
	v->fd[i] = fd;
	v->map[i] = m;
	v->maplen[i] = len;
	return 0;
}

int ks_view_open(struct ks_view *v, const struct kvmstats_pages *pg)
{
	size_t n = pg->n ? pg->n : 1;

	v->pg = pg;
	v->map = calloc(n, sizeof(*v->map));
	v->maplen = calloc(n, sizeof(*v->maplen));
	v->blind = calloc(n, sizeof(*v->blind));
	v->fd = malloc(n * sizeof(*v->fd));
	for (size_t i = 0; v->fd && i < n; i++)
		v->fd[i] = -1;
	if (!v->map || !v->maplen || !v->blind || !v->fd) {
		ks_view_close(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < pg->n; i++)
		if (from_file(&pg->ram->r[i]) && pg->r[i].ncand)
			view_region(v, i);
	return 0;
}

void ks_view_close(struct ks_view *v)
{
	for (size_t i = 0; v->map && v->fd && i < v->pg->n; i++) {
		if (v->map[i])
			munmap((void *)v->map[i], v->maplen[i]);
		if (v->fd[i] >= 0)
			close(v->fd[i]);
	}
	free(v->map);
	free(v->maplen);
	free(v->blind);
	free(v->fd);
	v->map = NULL;
	v->maplen = NULL;
	v->blind = NULL;
	v->fd = NULL;
}

/* In memory now, per page (mincore never faults; none on failure). */
static void in_memory(const struct ks_view *v, size_t region, uint64_t page,
		      size_t n, unsigned char *vec)
{
	const unsigned char *m = v->map[region] + page * KS_PAGE;

	if (page * KS_PAGE + n * KS_PAGE > v->maplen[region] ||
	    mincore((void *)m, n * KS_PAGE, vec))
		memset(vec, 0, n);
}

/* pread of [page, page + n) into @buf: the pages read in full. */
static size_t pread_pages(const struct ks_view *v, size_t region, uint64_t page,
			  size_t n, unsigned char *buf)
{
	const struct kvmstats_ram_region *r = &v->pg->ram->r[region];
	size_t want = n * KS_PAGE, got = 0;

	while (got < want) {
		ssize_t k = pread(v->fd[region], buf + got, want - got,
				  (off_t)(r->file_offset + page * KS_PAGE + got));

		if (k <= 0)
			break;	/* the end of the file: truncated */
		got += (size_t)k;
	}
	return got / KS_PAGE;
}

void ks_view_recheck(const struct ks_view *v, size_t region, uint64_t page,
		     size_t n, unsigned char *vec, bool *ok)
{
	in_memory(v, region, page, n, vec);
	for (size_t i = 0; i < n; i++)
		ok[i] = ok[i] && (vec[i] & 1);
}

size_t ks_view_read(const struct ks_view *v, size_t region, uint64_t page,
		    size_t n, unsigned char *buf, unsigned char *vec, bool *ok,
		    bool recheck)
{
	size_t good = 0;

	in_memory(v, region, page, n, vec);
	for (size_t i = 0; i < n;) {
		size_t run = 0, got;

		if (!(vec[i] & 1)) {
			ok[i++] = false;
			continue;
		}
		while (i + run < n && (vec[i + run] & 1))
			run++;
		got = pread_pages(v, region, page + i, run, buf + i * KS_PAGE);
		for (size_t k = 0; k < run; k++)
			ok[i + k] = k < got;
		i += run;
	}
	if (recheck)
		ks_view_recheck(v, region, page, n, vec, ok);
	for (size_t i = 0; i < n; i++)
		good += ok[i];
	return good;
}

/* Pages of regions read from their file, in runs of neighbours, into
 * slots @slot.. of @buf. */
static long fetch_files(const struct ks_view *v, const struct ks_pageref *refs,
			size_t n, size_t slot, unsigned char *buf, bool *ok,
			const unsigned char **ptr)
{
	unsigned char vec[VEC_PAGES];
	long good = 0;

	for (size_t i = 0; i < n;) {
		size_t r = refs[i].region, run = 1;

		if (v->fd[r] < 0) {
			i++;
			continue;
		}
		while (i + run < n && run < VEC_PAGES && refs[i + run].region == r &&
		       refs[i + run].page == refs[i].page + run)
			run++;
		good += (long)ks_view_read(v, r, refs[i].page, run,
					   buf + slot * KS_PAGE, vec, ok + slot, true);
		for (size_t k = 0; k < run; k++)
			ptr[i + k] = ok[slot + k] ? buf + (slot + k) * KS_PAGE : NULL;
		slot += run;
		i += run;
	}
	return good;
}

long ks_view_fetch(const struct ks_view *v, const struct ks_pageref *refs,
		   size_t n, unsigned char *buf, uint64_t *addr, bool *ok,
		   const unsigned char **ptr)
{
	const struct kvmstats_ram *ram = v->pg->ram;
	size_t nremote = 0;
	long good, got = 0;

	/* Slots of @buf: the pages copied from the VMM first, packed as
	 * ks_read_pages wants them, then those read from files. */
	for (size_t i = 0; i < n; i++) {
		size_t r = refs[i].region;

		ptr[i] = NULL;
		if (!v->blind[r] && v->fd[r] < 0)
			addr[nremote++] = ram->r[r].start + refs[i].page * KS_PAGE;
	}
	good = fetch_files(v, refs, n, nremote, buf, ok, ptr);
	if (nremote)
		got = ks_read_pages(ram->pid, addr, nremote, buf, ok);
	if (got < 0)
		return got;
	for (size_t i = 0, k = 0; nremote && i < n; i++) {
		size_t r = refs[i].region;

		if (v->blind[r] || v->fd[r] >= 0)
			continue;
		ptr[i] = ok[k] ? buf + k * KS_PAGE : NULL;
		k++;
	}
	return good + got;
}

int ks_view_count_zero(const struct ks_view *v, const struct ks_pageref *refs,
		       size_t n, unsigned char *buf, uint64_t *addr, bool *ok,
		       const unsigned char **ptr, uint64_t *read, uint64_t *zeros)
{
	long got = ks_view_fetch(v, refs, n, buf, addr, ok, ptr);

	if (got < 0)
		return (int)got;
	for (size_t i = 0; i < n; i++) {
		*read += ptr[i] != NULL;
		*zeros += ptr[i] && kvmstats_is_zero(ptr[i], KS_PAGE);
	}
	return 0;
}
