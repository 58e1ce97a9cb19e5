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
 * the target's allocation); only the words that changed are stored. The
 * reader's struct, the writer's target and its copy are prefetched a
 * few targets ahead, while the kernel copies others. Readers that are
 * not fds (attach, QMP, ...) are swept and added as write_host() does.
 *
 * What is left (bench/record): reading the block back costs 0.1-0.18x
 * of a pread by itself on kvm_pvm, where nothing stays in the L1 across
 * a system call; the compare with the copy and the entry about as much;
 * writing and checksumming 24 bytes per fd 0.08x.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kvmstats_log.h"
#include "log_format.h"
#include "log_writer_int.h"

#define PF_READER 8	/* the reader's struct: its fd and schema */
#define PF_TARGET 6	/* the writer's target struct */
#define PF_BASE 3	/* its copy of the block last written */

static int items_add(struct lw_sweep *w, struct kvmstats_reader *r,
		     const struct kvmstats_vmm *v, int32_t vm, int32_t vcpu)
{
	if (w->nitems == w->citems) {
		size_t cap = w->citems ? w->citems * 2 : 256;
		void *p = realloc(w->items, cap * sizeof(*w->items));

		if (!p)
			return -ENOMEM;
		w->items = p;
		w->citems = cap;
	}
	w->items[w->nitems++] = (struct lw_sweep_item){ r, v, vm, vcpu };
	return 0;
}

/* The flat list of @h's readers, in add_vmm()'s order, built without
 * touching a reader (each would be a cache miss here; the loop
 * prefetches them instead). Allocates only when the host gained readers. */
static int items_build(struct lw_sweep *w, struct kvmstats_host *h,
		       kvmstats_log_choose_fn choose, void *arg)
{
	int err = 0;

	w->nitems = 0;
	for (size_t i = 0; i < h->n && !err; i++) {
		const struct kvmstats_vmm *v = h->vmms[i];
		const struct kvmstats_vmm *wv = !choose || choose(v, arg) ? v : NULL;

		for (size_t j = 0; j < v->nvms && !err; j++) {
			const struct kvmstats_vm *vm = v->vms[j];

			/* Each VM is two cold lines, the second known from the
			 * first: fetch them a few VMs ahead. */
			if (j + 8 < v->nvms)
				__builtin_prefetch(v->vms[j + 8]);
			if (j + 4 < v->nvms)
				__builtin_prefetch(v->vms[j + 4]->vcpus);
			if (vm->r)
				err = items_add(w, vm->r, wv, (int32_t)j, -1);
			for (size_t k = 0; k < vm->nvcpus && !err; k++)
				err = items_add(w, vm->vcpus[k].r, wv, (int32_t)j,
						vm->vcpus[k].index);
		}
	}
	return err;
}

/* One fd target: pread into the scratch buffer, delta against the
 * writer's own copy. */
static int read_add(struct kvmstats_log_writer *lw, const struct kvmstats_log_target *t,
		    struct kvmstats_reader *r, int fd)
{
	struct kvmstats_schema *s = kvmstats_reader__schema(r);
	struct lw_sweep *w = lw_sweep(lw);
	ssize_t n;
	int err;

	if (s->data_size > w->scratch_size) {
		/* Only when a larger schema comes: kept for the next ones.
		 * Page-aligned: a block of a vCPU (1.1 KiB) is one page. */
		size_t size = (s->data_size + 4095) & ~(size_t)4095;
		void *p = aligned_alloc(4096, size);

		if (!p)
			return -ENOMEM;
		free(w->scratch);
		w->scratch = p;
		w->scratch_size = s->data_size;
	}
	n = pread(fd, w->scratch, s->data_size, (off_t)s->hdr.data_offset);
	err = n == (ssize_t)s->data_size ? 0 : n < 0 ? -errno : -ENODATA;
	return lw_add(lw, t, s, err ? NULL : w->scratch, err);
}

static int sweep_one(struct kvmstats_log_writer *w, struct kvmstats_log_target *t,
		     const struct lw_sweep_item *it, uint64_t time_ns)
{
	int fd = kvmstats_reader__fd(it->r);

	t->vm = it->vm;
	t->vcpu = it->vcpu;
	t->id = kvmstats_reader__id(it->r);
	if (fd >= 0)
		return read_add(w, t, it->r, fd);
	kvmstats_reader__sweep(it->r, time_ns);
	return lw_add_reader(w, t, it->r);
}

static void sweep_items(struct kvmstats_log_writer *w, uint64_t time_ns)
{
	const struct lw_sweep *sw = lw_sweep(w);
	struct kvmstats_log_target t = { 0 };
	const struct kvmstats_vmm *last = NULL;
	int err;

	for (size_t i = 0; i < sw->nitems && i < PF_READER; i++)
		ks_reader_prefetch(sw->items[i].r, 0);
	for (size_t i = 0; i < sw->nitems; i++) {
		const struct lw_sweep_item *it = &sw->items[i];

		if (i + PF_READER < sw->nitems)
			ks_reader_prefetch(sw->items[i + PF_READER].r, 0);
		lw_prefetch_target(w, PF_TARGET, false);
		lw_prefetch_target(w, PF_BASE, true);
		if (!it->v) {
			kvmstats_reader__sweep(it->r, time_ns);
			continue;
		}
		if (it->v != last) {
			last = it->v;
			t = (struct kvmstats_log_target){
				.pid = last->pid, .uid = last->uid, .name = last->name,
				.source = kvmstats_vmm__source(last),
			};
		}
		err = sweep_one(w, &t, it, time_ns);
		if (err && err != -EEXIST)
			ks_log(lw_ctx(w), KVMSTATS_LOG_WARN,
			       "%s: pid %d: %s: left out of this sample", lw_path(w),
			       (int)t.pid, strerror(-err));
	}
}

int kvmstats_log_writer__sweep_host(struct kvmstats_log_writer *w,
				    struct kvmstats_host *h,
				    kvmstats_log_choose_fn choose, void *arg)
{
	struct lw_sweep *sw = lw_sweep(w);
	int err;

	ks_host_drop_dead(h);
	h->time_ns = ks_now_ns();
	err = items_build(sw, h, choose, arg);
	if (err) {
		/* Out of memory: the two passes, which need no list. */
		kvmstats_host__sweep(h);
		return kvmstats_log_writer__write_host(w, h);
	}
	err = kvmstats_log_writer__begin(w, h->time_ns, 0);
	if (err) {
		/* Not written: every reader is read all the same. */
		for (size_t i = 0; i < sw->nitems; i++)
			sw->items[i].v = NULL;
	}
	sweep_items(w, h->time_ns);
	return err ? err : kvmstats_log_writer__commit(w);
}

