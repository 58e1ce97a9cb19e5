// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kvmstats_log_writer__sweep_host(): reading every reader of a host and
 * writing the sample in one pass (the writer itself is log_writer.c).
 *
 * kvmstats_host__sweep() then write_host() costs 1.8-2x the bare pread
 * loop over the same fds here:
 * the kernel copies each block into a reader's sample, cold (a sweep of
 * a thousand fds moves 2 MiB of them, more than the L2 holds), through a
 * chain of cold links (reader, sample, block), and long after the delta
 * reads that block and the previous one, cold again. Here an fd reader's
 * block is read into one scratch buffer, as the bare loop does, and
 * compared at once with the writer's own copy of what it last wrote (in
 * the target's allocation); only the words that changed are stored.
 *
 * The walk itself is kept from one sample to the next: a flat list of
 * the readers (fd, block offset and size, the writer's target), made
 * again only when the host's VMMs or readers changed (its generation)
 * or the writer freed targets. A sample is then a walk of that list:
 * pread, compare, encode, with the target and its copy prefetched a few
 * items ahead, and no VMM, VM, reader or hash table touched. Readers
 * that are not fds (attach, QMP, ...) are swept and added as
 * write_host() does.
 *
 * What is left (bench/record): reading the block back costs 0.1-0.18x
 * of a pread by itself on kvm_pvm, where nothing stays in the L1 across
 * a system call; the compare with the copy and the entry about as much;
 * writing and checksumming 8 bytes per unchanged fd (24 before the short
 * entries of version 2: 0.08x, now about 0.03x).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kvmstats_log.h"
#include "log_format.h"
#include "log_writer_int.h"

#define PF_READER 8 /* a reader that is not an fd: its struct */
#define PF_TARGET 6 /* the writer's target struct */
#define PF_BASE 3 /* its copy of the block last written */

static int items_add(struct lw_sweep *w, struct kvmstats_reader *r,
		     const struct kvmstats_vmm *v, int32_t vm, int32_t vcpu)
{
	const struct kvmstats_schema *s = kvmstats_reader__schema(r);
	int fd = kvmstats_reader__fd(r);

	if (w->nitems == w->citems) {
		size_t cap = w->citems ? w->citems * 2 : 256;
		void *p = realloc(w->items, cap * sizeof(*w->items));

		if (!p)
			return -ENOMEM;
		w->items = p;
		w->citems = cap;
	}
	/* A block too large for an entry is read the reader's way, and
	 * the writer says why it is left out. */
	if (!s || s->data_size > KS_MAX_DATA)
		fd = -1;
	w->items[w->nitems++] = (struct lw_sweep_item){
		.fd = fd,
		.r = r,
		.v = v,
		.vm = vm,
		.vcpu = vcpu,
		.size = fd >= 0 ? (uint32_t)s->data_size : 0,
		.offset = fd >= 0 ? (off_t)s->hdr.data_offset : 0,
	};
	return 0;
}

/* The pread buffer, as large as the largest block of the list (made
 * here, never in the loop). Page-aligned: a block of a vCPU (1.1 KiB)
 * is one page. */
static int scratch_fit(struct lw_sweep *w)
{
	size_t need = 0, size;
	void *p;

	for (size_t i = 0; i < w->nitems; i++)
		if (w->items[i].size > need)
			need = w->items[i].size;
	if (need <= w->scratch_size)
		return 0;
	size = (need + 4095) & ~(size_t)4095;
	p = aligned_alloc(4096, size);
	if (!p)
		return -ENOMEM;
	free(w->scratch);
	w->scratch = p;
	w->scratch_size = need;
	return 0;
}

/* The flat list of @h's readers, in add_vmm()'s order: each reader's fd,
 * block offset and size, so that a sample touches no VMM, VM or reader
 * struct of an fd. Made again only when the host's VMMs or readers
 * changed; allocates only when the host gained readers. */
static int items_build(struct lw_sweep *w, struct kvmstats_host *h,
		       kvmstats_log_choose_fn choose, void *arg)
{
	int err = 0;

	w->valid = false;
	w->nitems = 0;
	for (size_t i = 0; i < h->n && !err; i++) {
		const struct kvmstats_vmm *v = h->vmms[i];
		const struct kvmstats_vmm *wv =
			!choose || choose(v, arg) ? v : NULL;

		for (size_t j = 0; j < v->nvms && !err; j++) {
			const struct kvmstats_vm *vm = v->vms[j];

			if (vm->r)
				err = items_add(w, vm->r, wv, (int32_t)j, -1);
			for (size_t k = 0; k < vm->nvcpus && !err; k++)
				err = items_add(w, vm->vcpus[k].r, wv,
						(int32_t)j, vm->vcpus[k].index);
		}
	}
	if (!err)
		err = scratch_fit(w);
	if (err)
		return err;
	w->valid = true;
	w->host = h;
	w->host_gen = h->gen;
	w->choose = choose;
	w->arg = arg;
	return 0;
}

/* The list for this sample: kept, or its targets forgotten (the writer
 * freed some), or made again (the host changed). */
static int items_get(struct kvmstats_log_writer *lw, struct kvmstats_host *h,
		     kvmstats_log_choose_fn choose, void *arg)
{
	struct lw_sweep *w = lw_sweep(lw);
	int err = 0;

	if (!w->valid || w->host != h || w->host_gen != h->gen ||
	    w->choose != choose || w->arg != arg)
		err = items_build(w, h, choose, arg);
	else if (w->freed == lw_freed(lw))
		return 0;
	for (size_t i = 0; i < w->nitems; i++)
		w->items[i].wt = NULL;
	w->freed = lw_freed(lw);
	return err;
}

/* The log's name for @it: its VMM, VM and vCPU. */
static struct kvmstats_log_target item_log_target(const struct lw_sweep_item *it)
{
	const struct kvmstats_vmm *v = it->v;

	return (struct kvmstats_log_target){
		.pid = v->pid,
		.uid = v->uid,
		.name = v->name,
		.source = kvmstats_vmm__source(v),
		.vm = it->vm,
		.vcpu = it->vcpu,
	};
}

/* The target of @it, the first time it is written after the list was
 * made: its strings are read from the VMM and the reader once. */
static struct wtarget *item_target(struct kvmstats_log_writer *w,
				   struct lw_sweep_item *it)
{
	struct kvmstats_log_target t = item_log_target(it);

	t.id = kvmstats_reader__id(it->r);
	it->wt = lw_target(w, &t, kvmstats_reader__schema(it->r));
	return it->wt;
}

/* A reader that is not an fd (attach, QMP, ...): swept and added as
 * write_host() does. */
static int sweep_reader(struct kvmstats_log_writer *w,
			const struct lw_sweep_item *it, uint64_t time_ns)
{
	struct kvmstats_log_target t = item_log_target(it);

	kvmstats_reader__sweep(it->r, time_ns);
	return lw_add_reader(w, &t, it->r);
}

/* An fd: one pread into the scratch buffer, its delta taken at once
 * against the writer's own copy. */
static int sweep_fd(struct kvmstats_log_writer *w, struct lw_sweep_item *it,
		    uint64_t *scratch)
{
	struct wtarget *wt = it->wt ? it->wt : item_target(w, it);
	ssize_t n;
	int err;

	if (!wt)
		return -errno;
	n = pread(it->fd, scratch, it->size, it->offset);
	err = n == (ssize_t)it->size ? 0 : n < 0 ? -errno : -ENODATA;
	return lw_add_target(w, wt, err ? NULL : scratch, err);
}

static void prefetch(const struct lw_sweep *sw, size_t i)
{
	const struct lw_sweep_item *it;

	if (i + PF_READER < sw->nitems && sw->items[i + PF_READER].fd < 0)
		ks_reader_prefetch(sw->items[i + PF_READER].r, 0);
	if (i + PF_TARGET < sw->nitems && sw->items[i + PF_TARGET].wt)
		lw_prefetch_target(sw->items[i + PF_TARGET].wt, 0, false);
	it = i + PF_BASE < sw->nitems ? &sw->items[i + PF_BASE] : NULL;
	if (it && it->wt)
		lw_prefetch_target(it->wt, it->size, true);
}

static void sweep_items(struct kvmstats_log_writer *w, uint64_t time_ns,
			bool write)
{
	struct lw_sweep *sw = lw_sweep(w);
	int err;

	for (size_t i = 0; i < sw->nitems; i++) {
		struct lw_sweep_item *it = &sw->items[i];

		prefetch(sw, i);
		if (!write || !it->v) {
			kvmstats_reader__sweep(it->r, time_ns);
			continue;
		}
		err = it->fd >= 0 ? sweep_fd(w, it, sw->scratch)
				  : sweep_reader(w, it, time_ns);
		if (err && err != -EEXIST)
			ks_log(lw_ctx(w), KVMSTATS_LOG_WARN,
			       "%s: pid %d: %s: left out of this sample",
			       lw_path(w), (int)it->v->pid, strerror(-err));
	}
}

int kvmstats_log_writer__sweep_host(struct kvmstats_log_writer *w,
				    struct kvmstats_host *h,
				    kvmstats_log_choose_fn choose, void *arg)
{
	int err;

	ks_host_drop_dead(h);
	h->time_ns = ks_now_ns();
	err = items_get(w, h, choose, arg);
	if (err) {
		/* Out of memory: the two passes, which need no list. */
		kvmstats_host__sweep(h);
		return kvmstats_log_writer__write_host(w, h);
	}
	err = kvmstats_log_writer__begin(w, h->time_ns, 0);
	/* Not written when it cannot begin: every reader is read all the
	 * same. */
	sweep_items(w, h->time_ns, !err);
	return err ? err : kvmstats_log_writer__commit(w);
}
