// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Where is the guest's RAM in the VMM's address space?
 *
 * KVM's memory slots (KVM_SET_USER_MEMORY_REGION) cannot be read from
 * outside the VMM, so the answer is put together from what can:
 *
 *  1. The caller's ranges (--region), checked against /proc/PID/maps.
 *  2. QEMU: its RAM blocks over QMP. `x-query-ramblock` (QEMU 6.2+; the
 *     HMP `info ramblock` through human-monitor-command before that) gives
 *     each block's name, page size, used and total size. QEMU maps a block
 *     (qemu_ram_mmap) as one read-write mapping of exactly its total size,
 *     2 MiB aligned, followed by a PROT_NONE guard page: that signature
 *     finds it in /proc/PID/maps, whether anonymous, a memfd, hugetlbfs or
 *     a file. Migration sends only the used part, so only that counts.
 *     The same exchange reads QEMU's version and migration settings
 *     (query-version, query-migrate-capabilities and -parameters:
 *     migrate_settings.c) for the cost model.
 *     The socket is one QEMU's command line names, used only if QEMU
 *     could use it itself, and connected to through the file that was
 *     checked (lib/qmp_trust.c); the client is lib/qmp.c's, bounded in
 *     time and size. QEMU serves one client per monitor socket: when
 *     another client (libvirt) holds it, or it does not answer in time,
 *     we fall back to 3.
 *  3. A heuristic for any VMM, from /proc/PID/smaps, best tier first:
 *     a. read-write mappings the VMM marked as guest memory with
 *        MADV_DONTFORK, MADV_HUGEPAGE or MADV_MERGEABLE (VmFlags dc, hg,
 *        mg): QEMU, crosvm, cloud-hypervisor do so;
 *     b. shared memory: memfd, /dev/shm, hugetlbfs, shared anonymous;
 *     c. private anonymous mappings of 1 MiB or more that are neither the
 *        heap, a stack nor a glibc malloc arena (a 64 MiB-aligned heap
 *        followed by its PROT_NONE reserve), MAP_NORESERVE ones (VmFlags
 *        nr, which VMMs use for guest memory) first.
 *     It can be fooled by a VMM's own large buffers: --region is the way
 *     out, and each region says which rule picked it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mem_internal.h"
#include "source_qmp.h"

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif

#define KIB (1ull << 10)
#define MIB (1ull << 20)

struct ks_map {
	uint64_t start, end, off;
	char perms[5];
	uint64_t inode;
	char path[192];
	char vmflags[96];
	bool used;
};

struct maps {
	struct ks_map *m;
	size_t n, cap;
};

/* @arr, or where it moved to, with room for one more of @size bytes
 * after its @n (@*cap allocated); NULL, @arr untouched, without memory.
 * Doubled, so that tens of thousands of maps or regions (a VMM's to
 * choose) cost their number, not its square, in copies. */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
	size_t want = *cap ? 2 * *cap : 64;
	void *p;

	if (n < *cap)
		return arr;
	p = realloc(arr, want * size);
	if (p)
		*cap = want;
	return p;
}

/* ---- processes ---- */

int ks_pidfd_open(pid_t pid)
{
	int fd = (int)syscall(__NR_pidfd_open, pid, 0);

	return fd < 0 ? -errno : fd;
}

bool ks_pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return pidfd >= 0 && poll(&p, 1, 0) == 0;
}

#define KS_PF_EXITING 0x4u	/* the kernel's task flag */

/* A VMM that is exiting drops its memory (its pagemap reads as empty)
 * long before its pidfd says so: it closes its files in between, and
 * destroying a big VM there takes a while. While the pidfd says alive
 * the pid is still its own, so /proc/PID/stat's flags are. */
bool ks_vmm_gone(int pidfd, pid_t pid)
{
	char path[64], buf[512], *p;
	unsigned int flags = 0;
	ssize_t n;

	if (!ks_pidfd_alive(pidfd))
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = ks_read_small(path, buf, sizeof(buf));
	if (n <= 0)
		return n == -ENOENT;
	/* After the name (which may hold anything): state, ppid, pgrp,
	 * session, tty, tpgid, flags. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %u", &flags) != 1)
		return false;
	return flags & KS_PF_EXITING;
}

/* ---- /proc/PID/maps and smaps ---- */

static bool is_header(const char *line, struct ks_map *m)
{
	unsigned int maj, min;
	int pos = 0;

	memset(m, 0, sizeof(*m));
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 "%n",
		   &m->start, &m->end, m->perms, &m->off, &maj, &min, &m->inode,
		   &pos) < 7)
		return false;
	line += pos;
	while (*line == ' ')
		line++;
	snprintf(m->path, sizeof(m->path), "%.*s", (int)strcspn(line, "\n"), line);
	return true;
}

static int maps_add(struct maps *ms, const struct ks_map *m)
{
	struct ks_map *a = grow(ms->m, &ms->cap, ms->n, sizeof(*ms->m));

	if (!a)
		return -ENOMEM;
	ms->m = a;
	ms->m[ms->n++] = *m;
	return 0;
}

/* smaps costs a walk of the page tables: read it only for the heuristic. */
static int read_maps(pid_t pid, bool smaps, struct maps *ms)
{
	char path[64], line[512];
	struct ks_map m;
	FILE *f;
	int err = 0;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, smaps ? "smaps" : "maps");
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (!err && fgets(line, sizeof(line), f)) {
		if (is_header(line, &m)) {
			err = maps_add(ms, &m);
			continue;
		}
		if (smaps && ms->n && !strncmp(line, "VmFlags:", 8))
			snprintf(ms->m[ms->n - 1].vmflags,
				 sizeof(ms->m[0].vmflags), "%.*s",
				 (int)strcspn(line + 8, "\n"), line + 8);
	}
	fclose(f);
	if (!err && !ms->n)
		err = -ESRCH;	/* a zombie has no mappings */
	return err;
}

static void maps_free(struct maps *ms)
{
	free(ms->m);
	ms->m = NULL;
	ms->n = ms->cap = 0;
}

static bool has_flag(const struct ks_map *m, const char *flag)
{
	const char *p = m->vmflags;
	size_t len = strlen(flag);

	while ((p = strstr(p, flag))) {
		if ((p == m->vmflags || p[-1] == ' ') && (!p[len] || p[len] == ' '))
			return true;
		p += len;
	}
	return false;
}

static bool is_rw(const struct ks_map *m)
{
	return m->perms[0] == 'r' && m->perms[1] == 'w';
}

static uint64_t map_size(const struct ks_map *m)
{
	return m->end - m->start;
}

/* What backs a mapping: statfs of its file (root, and only on a file
 * system we may read: see mem_file.c), else its name. A file we may
 * not read gets its file system in @refused. */
static enum kvmstats_ram_kind map_kind(const struct kvmstats_ram *ram,
				       const struct ks_map *m,
				       uint32_t *page_size, char *refused,
				       size_t len)
{
	struct statfs sfs;
	int fd, err;

	*page_size = KS_PAGE;
	if (!m->path[0])
		return KVMSTATS_RAM_ANON;
	if (strstr(m->path, "anon_hugepage")) {
		*page_size = 2u << 20;
		return KVMSTATS_RAM_HUGETLB;
	}
	fd = ks_map_file_path(ram->pid, m->start, m->end);
	err = fd < 0 ? fd : ks_file_readable(ram, fd, refused, len);
	if (!err && !fstatfs(fd, &sfs)) {
		close(fd);
		refused[0] = 0;
		if ((unsigned long)sfs.f_type == HUGETLBFS_MAGIC) {
			*page_size = (uint32_t)sfs.f_bsize;
			return KVMSTATS_RAM_HUGETLB;
		}
		if ((unsigned long)sfs.f_type == TMPFS_MAGIC)
			return KVMSTATS_RAM_SHMEM;
		return KVMSTATS_RAM_FILE;
	}
	if (fd >= 0)
		close(fd);
	if (err != -EREMOTE)
		refused[0] = 0;
	if (!strncmp(m->path, "/memfd:", 7) || !strncmp(m->path, "/dev/shm/", 9) ||
	    !strncmp(m->path, "/dev/zero", 9) || !strncmp(m->path, "/SYSV", 5))
		return KVMSTATS_RAM_SHMEM;
	return KVMSTATS_RAM_FILE;
}

static int add_region(struct kvmstats_ram *ram, const struct ks_map *m,
		      uint64_t start, uint64_t len, const char *name,
		      const char *why)
{
	struct kvmstats_ram_region *r;
	char fs[64] = "";

	r = grow(ram->r, &ram->r_cap, ram->n, sizeof(*ram->r));
	if (!r)
		return -ENOMEM;
	ram->r = r;
	r = &ram->r[ram->n++];
	memset(r, 0, sizeof(*r));
	r->start = start;
	r->len = len;
	r->map_len = m->end - start;
	r->vma_start = m->start;
	r->file_offset = m->off + (start - m->start);
	r->kind = map_kind(ram, m, &r->page_size, fs, sizeof(fs));
	r->shared = m->perms[3] == 's';
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->path, sizeof(r->path), "%s", m->path);
	snprintf(r->why, sizeof(r->why), "%s%s%s%s", why, fs[0] ? "; not read: "
		 "its file is on " : "", fs, fs[0] ? ", not a file system the kernel serves alone" : "");
	ram->bytes += len;
	return 0;
}

/* ---- 1. the caller's ranges ---- */

int kvmstats_range__parse(const char *s, struct kvmstats_range *r)
{
	char *end;
	uint64_t a, b;
	bool plus;

	if (!s || !r)
		return -EINVAL;
	errno = 0;
	a = strtoull(s, &end, 16);
	if (errno || end == s || (*end != '-' && *end != '+'))
		return -EINVAL;
	plus = *end == '+';
	s = end + 1;
	b = strtoull(s, &end, plus ? 0 : 16);
	if (errno || end == s)
		return -EINVAL;
	if (plus) {
		int shift = 0;

		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; end++; break;
		case 'M': shift = 20; end++; break;
		case 'G': shift = 30; end++; break;
		}
		if (b > (UINT64_MAX >> shift))
			return -EINVAL;
		b = a + (b << shift);
	}
	if (*end || b <= a)
		return -EINVAL;
	r->start = a;
	r->end = b;
	return 0;
}

static int use_ranges(struct kvmstats_ram *ram, const struct maps *ms,
		      const struct kvmstats_range *rg, size_t n, char *err,
		      size_t errsz)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t at = rg[i].start & ~(uint64_t)(KS_PAGE - 1);
		uint64_t end = (rg[i].end + KS_PAGE - 1) & ~(uint64_t)(KS_PAGE - 1);

		for (size_t j = 0; j < ms->n && at < end; j++) {
			const struct ks_map *m = &ms->m[j];
			uint64_t stop = end < m->end ? end : m->end;
			char why[96];
			int e;

			if (at < m->start || at >= m->end)
				continue;
			if (!is_rw(m))
				break;
			snprintf(why, sizeof(why), "--region %" PRIx64 "-%" PRIx64,
				 rg[i].start, rg[i].end);
			e = add_region(ram, m, at, stop - at, "region", why);
			if (e)
				return e;
			at = stop;
		}
		if (at < end) {
			ks_err(err, errsz, "--region: %" PRIx64 " is not in a "
			       "read-write mapping of pid %d", at, (int)ram->pid);
			return -EINVAL;
		}
	}
	ram->how = KVMSTATS_RAM_OVERRIDE;
	return 0;
}

/* ---- 2. QEMU over QMP ---- */

/* Our answers are a few KiB (info ramblock, the parameters): a monitor
 * that sends more is not answering us. */
#define QMP_MAX_ANSWER (1u << 20)

/* ---- RAM blocks ---- */

struct qblock {
	char name[64];
	uint64_t psize, used, total;
};

/* Each block is matched against every mapping (up to vm.max_map_count,
 * 65530 by default): a QEMU has tens of blocks (256 DIMM slots at most,
 * a few ROMs and video RAMs each), and a monitor that names 40,000 made
 * plan spend 6 s of CPU matching them to 30,000 mappings. */
#define QMP_MAX_BLOCKS 1024u

static uint64_t unit_bytes(const char *u)
{
	if (!strcmp(u, "KiB"))
		return 1ull << 10;
	if (!strcmp(u, "MiB"))
		return 1ull << 20;
	if (!strcmp(u, "GiB"))
		return 1ull << 30;
	return 1;
}

/* One line of `info ramblock`: NAME... PSIZE UNIT OFFSET USED TOTAL,
 * parsed from the right (a name could hold a space). */
static bool parse_block_line(char *line, int extra, struct qblock *b)
{
	char *t[32], *save = NULL;
	int k = 0;
	size_t used = 0;

	for (char *s = strtok_r(line, " \t\r", &save); s && k < 32;
	     s = strtok_r(NULL, " \t\r", &save))
		t[k++] = s;
	if (extra < 0)
		return false;
	k -= extra;	/* columns after Total (QEMU 10: HVA, RO) */
	if (k < 6 || strncmp(t[k - 1], "0x", 2))
		return false;
	b->total = strtoull(t[k - 1], NULL, 16);
	b->used = strtoull(t[k - 2], NULL, 16);
	b->psize = strtoull(t[k - 5], NULL, 10) * unit_bytes(t[k - 4]);
	b->name[0] = 0;
	for (int i = 0; i < k - 5 && used + 1 < sizeof(b->name); i++)
		used += (size_t)snprintf(b->name + used, sizeof(b->name) - used, "%s%s",
					 i ? " " : "", t[i]);
	return b->total && b->used <= b->total;
}

/* The columns the header names after "Total": none up to QEMU 9, "HVA"
 * and "RO" from QEMU 10 on. */
static int header_extra(const char *header)
{
	const char *p = strstr(header, "Total");
	int n = 0;

	for (p = p ? p + 5 : ""; *p; n++) {
		p += strspn(p, " \t\r");
		if (!*p)
			break;
		p += strcspn(p, " \t\r");
	}
	return n > 8 ? 8 : n;
}

static int parse_blocks(const char *text, struct qblock **out, size_t *n)
{
	char *copy = strdup(text), *save = NULL;
	struct qblock b, *v = NULL;
	int err = 0, extra = 0;

	if (!copy)
		return -ENOMEM;
	*n = 0;
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		void *p;

		if (strstr(l, "Block Name")) {
			extra = header_extra(l);
			continue;
		}
		if (!parse_block_line(l, extra, &b))
			continue;
		if (*n >= QMP_MAX_BLOCKS) {
			err = -E2BIG;
			break;
		}
		p = realloc(v, (*n + 1) * sizeof(*v));
		if (!p) {
			err = -ENOMEM;
			break;
		}
		v = p;
		v[(*n)++] = b;
	}
	free(copy);
	*out = v;
	return err ? err : (*n ? 0 : -ENOENT);
}

/* The RAM blocks as text: x-query-ramblock (QEMU 6.2+), else HMP's
 * `info ramblock`. *o gets the answer that holds the text. */
static int ramblock_text(struct ks_qmp *q, uint64_t deadline,
			 struct json_object **o, const char **text, char *err,
			 size_t errsz)
{
	struct json_object *args, *v;
	int e;

	*text = NULL;
	e = ks_qmp_call(q, "x-query-ramblock", NULL, deadline, o, err, errsz);
	if (!e && json_object_object_get_ex(*o, "human-readable-text", &v) &&
	    json_object_is_type(v, json_type_string))
		*text = json_object_get_string(v);
	if (e != -EREMOTEIO)
		return e;
	args = json_object_new_object();
	if (!args)
		return -ENOMEM;
	json_object_object_add(args, "command-line",
			       json_object_new_string("info ramblock"));
	e = ks_qmp_call(q, "human-monitor-command", args, deadline, o, err, errsz);
	json_object_put(args);
	if (!e && json_object_is_type(*o, json_type_string))
		*text = json_object_get_string(*o);
	return e;
}

/* Optional (the model has defaults): every migration setting that
 * changes its cost (migrate_settings.c). */
static void migrate_params(struct kvmstats_ram *ram, struct ks_qmp *q,
			   uint64_t deadline)
{
	ks_migrate_qmp(q, deadline, &ram->mig);
	ram->mig_read = true;
	if (ram->mig.src[KVMSTATS_MIG_BANDWIDTH] == KVMSTATS_MIG_SRC_QMP)
		ram->max_bandwidth = (uint64_t)ram->mig.bandwidth;
	if (ram->mig.src[KVMSTATS_MIG_DOWNTIME] == KVMSTATS_MIG_SRC_QMP)
		ram->downtime_ms = (uint32_t)(ram->mig.downtime_s * 1e3 + 0.5);
}

/* The QMP exchange, through @pathfd (ks_qmp_sock_open()): the file that
 * was checked is the one connected to, whatever is renamed over its path
 * meanwhile. @as: the process whose word the path is (0: ours). */
static int qmp_query(struct kvmstats_ram *ram, int pathfd, const struct stat *st,
		     pid_t as, unsigned int timeout_ms, struct qblock **blocks,
		     size_t *nblocks, char *why, size_t why_sz)
{
	uint64_t deadline = ks_qmp_deadline(timeout_ms);
	struct json_object *o = NULL;
	const char *text;
	struct ks_qmp *q;
	char e[200] = "";
	int err;

	err = ks_qmp_connect_fd(&q, pathfd, st, ram->qmp_path, as, -1, 0,
				deadline, why, why_sz);
	if (err)
		return err;
	ks_qmp_set_max_msg(q, QMP_MAX_ANSWER);
	err = ramblock_text(q, deadline, &o, &text, e, sizeof(e));
	if (!err)
		err = text ? parse_blocks(text, blocks, nblocks) : -EPROTO;
	json_object_put(o);
	if (!err)
		migrate_params(ram, q, deadline);
	ks_qmp_close(q);
	if (err)
		ks_err(why, why_sz, "QMP socket %s: %s", ram->qmp_path,
		       err == -EPROTO ? "no RAM blocks in its answer" :
		       err == -E2BIG ? "more than 1024 RAM blocks (refused)" :
		       e[0] ? e : strerror(-err));
	return err;
}

/* How well does mapping @m fit block @b? 0: not at all. */
static int block_score(const struct maps *ms, size_t i, const struct qblock *b)
{
	const struct ks_map *m = &ms->m[i];
	uint64_t align = b->psize > KS_PAGE ? b->psize : KS_PAGE;
	uint64_t want = (b->total + align - 1) & ~(align - 1);
	int score = 1;

	if (m->used || !is_rw(m) || map_size(m) != want || m->path[0] == '[')
		return 0;
	if (i + 1 < ms->n && ms->m[i + 1].start == m->end &&
	    !strcmp(ms->m[i + 1].perms, "---p"))
		score += 4;	/* qemu_ram_mmap's guard page */
	if (!(m->start % (2 * MIB)))
		score += 2;	/* QEMU_VMALLOC_ALIGN */
	/* Huge pages come from hugetlbfs or MAP_HUGETLB: never anonymous. */
	if (b->psize <= KS_PAGE || m->path[0])
		score += 1;
	return score;
}

static int match_blocks(struct kvmstats_ram *ram, struct maps *ms,
			const struct qblock *b, size_t nb, char *unmatched,
			size_t ulen)
{
	size_t missed = 0;

	unmatched[0] = 0;
	for (size_t k = 0; k < nb; k++) {
		int best = 0, err;
		size_t at = 0;
		char why[160];

		for (size_t i = 0; i < ms->n; i++) {
			int s = block_score(ms, i, &b[k]);

			if (s > best) {
				best = s;
				at = i;
			}
		}
		if (!best) {
			size_t l = strlen(unmatched);

			snprintf(unmatched + l, ulen - l, "%s%s", missed++ ? ", " : "",
				 b[k].name);
			continue;
		}
		ms->m[at].used = true;
		snprintf(why, sizeof(why), "QEMU RAM block %s (used %" PRIu64
			 " of %" PRIu64 " KiB, page %" PRIu64 " KiB) = mapping of "
			 "its size%s", b[k].name, b[k].used >> 10, b[k].total >> 10,
			 b[k].psize >> 10, best >= 5 ? " with QEMU's guard page" : "");
		err = add_region(ram, &ms->m[at], ms->m[at].start,
				 (b[k].used + KS_PAGE - 1) & ~(uint64_t)(KS_PAGE - 1),
				 b[k].name, why);
		if (err)
			return err;
		if (b[k].psize > ram->r[ram->n - 1].page_size)
			ram->r[ram->n - 1].page_size = (uint32_t)b[k].psize;
	}
	return missed == nb ? -ENOENT : 0;
}

/* One monitor socket: @path as @as named it (0: the caller's own), taken
 * only if @as could use it itself. */
static int try_socket(struct kvmstats_ram *ram, const struct kvmstats_ram_opts *o,
		      struct maps *ms, const char *path, pid_t as,
		      bool *answered, char *why, size_t why_sz)
{
	char unmatched[256];
	struct qblock *b = NULL;
	struct stat st;
	size_t nb = 0;
	int fd, err;

	fd = ks_qmp_sock_open(path, as, &st, why, why_sz);
	if (fd < 0)
		return fd;
	snprintf(ram->qmp_path, sizeof(ram->qmp_path), "%s", path);
	err = qmp_query(ram, fd, &st, as, o->timeout_ms ? o->timeout_ms : 1000,
			&b, &nb, why, why_sz);
	close(fd);
	if (err == -ETIMEDOUT)
		ks_err(why, why_sz, "QMP socket %s: no answer in time (a hung "
		       "monitor?)", path);
	if (err)
		goto out;
	*answered = true;
	err = match_blocks(ram, ms, b, nb, unmatched, sizeof(unmatched));
	if (err) {
		ks_err(why, why_sz, "QMP: no RAM block matched a mapping");
		goto out;
	}
	ram->how = KVMSTATS_RAM_QMP;
	if (unmatched[0])
		ks_err(why, why_sz, "RAM blocks without a matching mapping: %.*s",
		       (int)why_sz - 40, unmatched);
	else
		why[0] = 0;
out:
	free(b);
	return err;
}

/* The caller's socket, else the monitor sockets QEMU names on its command
 * line (lib/qmp_cmdline.c, libvirt's fd-passed one included): a path on
 * a less trusted process's command line must not make us its deputy. */
static int try_qmp(struct kvmstats_ram *ram, const struct kvmstats_ram_opts *o,
		   struct maps *ms)
{
	char (*socks)[PATH_MAX] = NULL;
	char why[sizeof(ram->note)] = "";
	int n = 1, err = -ENOENT;
	bool answered = false;

	if (!o->qmp_path) {
		socks = calloc(KS_QMP_MAX_SOCKS, PATH_MAX);
		if (!socks)
			return -ENOMEM;
		n = ks_qmp_find_sockets(ram->pid, KS_QMP_FIND_FD, socks,
					KS_QMP_MAX_SOCKS);
		if (n < 0)
			err = n;
	}
	/* Until one answers: another monitor of the same QEMU would give
	 * the same blocks. */
	for (int i = 0; i < n && err && !answered; i++)
		err = try_socket(ram, o, ms, socks ? socks[i] : o->qmp_path,
				 socks ? ram->pid : 0, &answered, why, sizeof(why));
	free(socks);
	snprintf(ram->note, sizeof(ram->note), "%s",
		 !err || why[0] ? why : err == -ENOTSUP ? "not QEMU" :
		 "no QMP socket on QEMU's command line");
	return err;
}

/* ---- 3. the heuristic ---- */

static bool special(const struct ks_map *m)
{
	return m->path[0] == '[' || !strncmp(m->path, "anon_inode:", 11) ||
	       !strncmp(m->path, "/dev/kvm", 8);
}

static bool shared_mem(const struct ks_map *m)
{
	return m->perms[3] == 's' &&
	       (!strncmp(m->path, "/memfd:", 7) || !strncmp(m->path, "/dev/shm/", 9) ||
		!strncmp(m->path, "/dev/zero", 9) || strstr(m->path, "anon_hugepage") ||
		!strncmp(m->path, "/SYSV", 5) || !strncmp(m->path, "/dev/hugepages", 14));
}

/* glibc's malloc arenas: a heap at a 64 MiB boundary whose reserve is a
 * PROT_NONE mapping up to the next boundary. */
static bool malloc_arena(const struct maps *ms, size_t i)
{
	const struct ks_map *m = &ms->m[i];
	const uint64_t heap = 64 * MIB;

	return !(m->start % heap) && i + 1 < ms->n &&
	       ms->m[i + 1].start == m->end && !strcmp(ms->m[i + 1].perms, "---p") &&
	       ms->m[i + 1].end - m->start <= heap;
}

/* A thread stack: a private mapping right after its guard page. */
static bool thread_stack(const struct maps *ms, size_t i)
{
	return i > 0 && ms->m[i - 1].end == ms->m[i].start &&
	       !strcmp(ms->m[i - 1].perms, "---p") && map_size(&ms->m[i - 1]) <= 64 * KIB;
}

enum tier { T_NONE, T_ANON, T_NORESERVE, T_SHARED, T_MARKED };

static enum tier heur_tier(const struct maps *ms, size_t i)
{
	const struct ks_map *m = &ms->m[i];

	if (!is_rw(m) || special(m) || map_size(m) < 64 * KIB)
		return T_NONE;
	if ((has_flag(m, "dc") || has_flag(m, "hg") || has_flag(m, "mg")) &&
	    (!m->path[0] || shared_mem(m)))
		return T_MARKED;
	if (shared_mem(m))
		return map_size(m) >= MIB ? T_SHARED : T_NONE;
	if (m->path[0] || map_size(m) < MIB || malloc_arena(ms, i) ||
	    thread_stack(ms, i))
		return T_NONE;
	return has_flag(m, "nr") ? T_NORESERVE : T_ANON;
}

static int use_heuristic(struct kvmstats_ram *ram, const struct maps *ms)
{
	static const char *const why[] = {
		[T_MARKED] = "heuristic: read-write mapping marked as guest memory (MADV_DONTFORK/HUGEPAGE/MERGEABLE)",
		[T_SHARED] = "heuristic: shared memory mapping (memfd, shm, hugetlbfs)",
		[T_NORESERVE] = "heuristic: large anonymous MAP_NORESERVE mapping",
		[T_ANON] = "heuristic: large anonymous mapping (not heap, stack or arena)",
	};
	enum tier best = T_NONE;
	int err;

	for (size_t i = 0; i < ms->n; i++) {
		enum tier t = heur_tier(ms, i);

		if (t > best)
			best = t;
	}
	if (best == T_NONE)
		return -ENOENT;
	for (size_t i = 0; i < ms->n; i++) {
		if (heur_tier(ms, i) != best)
			continue;
		err = add_region(ram, &ms->m[i], ms->m[i].start, map_size(&ms->m[i]),
				 ms->m[i].path[0] ? ms->m[i].path : "anon", why[best]);
		if (err)
			return err;
	}
	ram->how = KVMSTATS_RAM_HEURISTIC;
	return 0;
}

/* ---- the object ---- */

static int find_ram(struct kvmstats_ram *ram, const struct kvmstats_ram_opts *o)
{
	struct maps ms = { 0 };
	int err = read_maps(ram->pid, false, &ms);

	if (err) {
		ks_err(o->errbuf, o->errbuf_sz, "pid %d: reading its memory map: %s",
		       (int)ram->pid, strerror(-err));
		goto out;	/* a partial read holds memory */
	}
	if (o->nranges) {
		err = use_ranges(ram, &ms, o->ranges, o->nranges, o->errbuf,
				 o->errbuf_sz);
		goto out;
	}
	if (!(o->flags & KVMSTATS_RAM_NO_QMP) && !try_qmp(ram, o, &ms))
		goto out;
	/* The heuristic needs VmFlags; start again from smaps. */
	free(ram->r);
	ram->r = NULL;
	ram->n = ram->r_cap = 0;
	ram->bytes = 0;
	maps_free(&ms);
	err = read_maps(ram->pid, true, &ms);
	if (!err)
		err = use_heuristic(ram, &ms);
	if (err == -ENOENT)
		ks_err(o->errbuf, o->errbuf_sz, "pid %d: no mapping looks like guest "
		       "RAM%s%s; give --region", (int)ram->pid, ram->note[0] ? "; " : "",
		       ram->note);
out:
	maps_free(&ms);
	return err;
}

struct kvmstats_ram *kvmstats_ram__open(pid_t pid,
					const struct kvmstats_ram_opts *opts)
{
	struct kvmstats_ram_opts o;
	struct kvmstats_ram *ram;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || pid <= 0 || (o.nranges && !o.ranges)) {
		errno = EINVAL;
		return NULL;
	}
	ram = calloc(1, sizeof(*ram));
	if (!ram) {
		errno = ENOMEM;
		return NULL;
	}
	ram->pid = pid;
	ram->pidfd = ks_pidfd_open(pid);
	if (ram->pidfd < 0) {
		err = ram->pidfd;
		ks_err(o.errbuf, o.errbuf_sz, "pid %d: %s", (int)pid, strerror(-err));
		goto err;
	}
	ks_file_probe(ram);
	err = find_ram(ram, &o);
	/* A VMM that exits while we ask it (its QMP socket closes under
	 * us) failed because it exited: say that, not the socket's error. */
	if (err == -ESRCH || !ks_pidfd_alive(ram->pidfd)) {
		err = -ESRCH;
		ks_err(o.errbuf, o.errbuf_sz, "pid %d exited", (int)pid);
	}
	if (err)
		goto err;
	return ram;
err:
	kvmstats_ram__free(ram);
	errno = -err;
	return NULL;
}

void kvmstats_ram__free(struct kvmstats_ram *ram)
{
	if (!ram)
		return;
	if (ram->pidfd >= 0)
		close(ram->pidfd);
	free(ram->r);
	free(ram->mounts);
	free(ram);
}

pid_t kvmstats_ram__pid(const struct kvmstats_ram *ram)
{
	return ram->pid;
}

int kvmstats_ram__pidfd(const struct kvmstats_ram *ram)
{
	return ram->pidfd;
}

bool kvmstats_ram__alive(const struct kvmstats_ram *ram)
{
	return ks_pidfd_alive(ram->pidfd);
}

size_t kvmstats_ram__count(const struct kvmstats_ram *ram)
{
	return ram->n;
}

const struct kvmstats_ram_region *kvmstats_ram__region(const struct kvmstats_ram *ram,
						       size_t i)
{
	if (i >= ram->n) {
		errno = ENOENT;
		return NULL;
	}
	return &ram->r[i];
}

uint64_t kvmstats_ram__bytes(const struct kvmstats_ram *ram)
{
	return ram->bytes;
}

enum kvmstats_ram_how kvmstats_ram__how(const struct kvmstats_ram *ram)
{
	return ram->how;
}

const char *kvmstats_ram_how_str(enum kvmstats_ram_how how)
{
	switch (how) {
	case KVMSTATS_RAM_QMP:
		return "qmp";
	case KVMSTATS_RAM_HEURISTIC:
		return "heuristic";
	case KVMSTATS_RAM_OVERRIDE:
		return "region";
	}
	return "unknown";
}

const char *kvmstats_ram__note(const struct kvmstats_ram *ram)
{
	return ram->note;
}

uint64_t kvmstats_ram__max_bandwidth(const struct kvmstats_ram *ram)
{
	return ram->max_bandwidth;
}

uint32_t kvmstats_ram__downtime_ms(const struct kvmstats_ram *ram)
{
	return ram->downtime_ms;
}

const char *kvmstats_ram__qmp_path(const struct kvmstats_ram *ram)
{
	return ram->how == KVMSTATS_RAM_QMP ? ram->qmp_path : "";
}
