// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * In which order QEMU lists a histogram's buckets.
 *
 * QEMU builds each multi-value stat's list by prepending
 * (QAPI_LIST_PREPEND in add_kvmstat_entry(), accel/kvm/kvm-all.c), so
 * query-stats gives the buckets last first: measured on QEMU 7.2 and 10.0
 * against the kernel's own stats fd of the same vCPU. A release could
 * change that, so a version number is not trusted alone: where the
 * kernel can tell (stats fds the VMM holds, as QEMU 8.1+ does, or ones it
 * is made to open when attach is allowed), one query-stats is compared
 * with the kernel's readings taken just before and just after it, once
 * per QEMU binary (its device, inode, size and mtime, through
 * /proc/PID/exe), and the verdict is kept in the context. Otherwise the
 * known order of the release is used; a release newer than those known
 * is taken to keep the last known order, and said to be assumed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "source_qmp.h"

/* query-stats exists from 7.1 on; the releases checked, and those whose
 * code builds the lists the same way. */
#define KNOWN_MAJOR_MIN 7
#define KNOWN_MAJOR_MAX 10

void ks_hist_order_of_version(const char *version, struct ks_hist_order *o)
{
	int major = 0;

	o->reversed = true;
	if (sscanf(version, "%d.", &major) == 1 && major >= KNOWN_MAJOR_MIN &&
	    major <= KNOWN_MAJOR_MAX)
		o->from = "version";
	else
		o->from = "assumed";
}

/* The identity of the binary @pid runs. */
static int exe_key(pid_t pid, struct ks_exe_order *k)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (stat(path, &st))
		return -errno;
	k->dev = st.st_dev;
	k->ino = st.st_ino;
	k->size = (uint64_t)st.st_size;
	k->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
		      (uint64_t)st.st_mtim.tv_nsec;
	return 0;
}

static bool same_exe(const struct ks_exe_order *a, const struct ks_exe_order *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns;
}

bool ks_hist_order_known(struct kvmstats_ctx *ctx, pid_t pid,
			 struct ks_hist_order *o)
{
	struct ks_exe_order k;
	unsigned int n;

	if (!ctx || exe_key(pid, &k))
		return false;
	n = ctx->nhist_order < ARRAY_SIZE(ctx->hist_order) ?
		    ctx->nhist_order : ARRAY_SIZE(ctx->hist_order);
	for (unsigned int i = 0; i < n; i++) {
		if (!same_exe(&ctx->hist_order[i], &k))
			continue;
		o->reversed = ctx->hist_order[i].reversed;
		o->from = "kernel";
		return true;
	}
	return false;
}

static void remember(struct kvmstats_ctx *ctx, pid_t pid, bool reversed)
{
	struct ks_exe_order k;
	struct ks_hist_order o;

	if (!ctx || exe_key(pid, &k) || ks_hist_order_known(ctx, pid, &o))
		return;
	k.reversed = reversed;
	ctx->hist_order[ctx->nhist_order++ % ARRAY_SIZE(ctx->hist_order)] = k;
}

/* ---- the check -------------------------------------------------------- */

struct ks_hist_check {
	struct kvmstats_ctx *ctx;
	pid_t pid;
	struct kvmstats_vmm *v;	/* readers of the kernel's stats fds */
};

void ks_hist_check_free(struct ks_hist_check *c)
{
	if (!c)
		return;
	kvmstats_vmm__close(c->v);
	free(c);
}

static size_t vcpu_readers(const struct kvmstats_vmm *v)
{
	size_t n = 0;

	for (size_t i = 0; i < v->nvms; i++)
		n += v->vms[i]->nvcpus;
	return n;
}

static void sweep_vcpus(struct kvmstats_vmm *v)
{
	uint64_t now = ks_now_ns();

	for (size_t i = 0; i < v->nvms; i++)
		for (size_t j = 0; j < v->vms[i]->nvcpus; j++)
			kvmstats_reader__sweep(v->vms[i]->vcpus[j].r, now);
}

struct ks_hist_check *ks_hist_check_start(const struct ks_source_args *a,
					  pid_t pid)
{
	struct ks_hist_check *c = calloc(1, sizeof(*c));
	struct ks_source_args aa = *a;

	if (!c)
		return NULL;
	c->ctx = a->ctx;
	c->pid = pid;
	c->v = kvmstats_vmm__new(pid, NULL);
	if (!c->v || ks_vmm_pidfd_open(c->v))
		goto none;
	if (ks_vmm_take_held_fds(a->ctx, c->v) < 0)
		goto none;
	/* None held: the VMM opens some for us, if the user allows it. */
	aa.errbuf = NULL;
	aa.errbuf_sz = 0;
	aa.vm_only = false;
	if (!vcpu_readers(c->v) && (a->opts->flags & KVMSTATS_HOST_ATTACH) &&
	    ks_source_attach.open(&aa, c->v))
		goto none;
	if (!vcpu_readers(c->v))
		goto none;
	sweep_vcpus(c->v);
	return c;
none:
	ks_hist_check_free(c);
	return NULL;
}

/* QEMU's cpu-index of the vCPU at @qom_path, or -1. */
static int cpu_index(struct json_object *cpus, const char *qom_path)
{
	size_t n = json_object_is_type(cpus, json_type_array) ?
			   json_object_array_length(cpus) : 0;

	for (size_t i = 0; i < n && qom_path; i++) {
		struct json_object *e = json_object_array_get_idx(cpus, i), *v;
		const char *p = ks_json_str(e, "qom-path");

		if (p && !strcmp(p, qom_path) &&
		    json_object_object_get_ex(e, "cpu-index", &v))
			return json_object_get_int(v);
	}
	return -1;
}

static struct kvmstats_reader *kernel_vcpu(const struct kvmstats_vmm *v,
					   int index)
{
	for (size_t i = 0; i < v->nvms; i++)
		for (size_t j = 0; j < v->vms[i]->nvcpus; j++)
			if (v->vms[i]->vcpus[j].index == index)
				return v->vms[i]->vcpus[j].r;
	return NULL;
}

/* Does QEMU's list @q lie between the kernel's readings @a and @b,
 * bucket by bucket, read forward (or backward)? */
static bool between(const uint64_t *a, const uint64_t *b,
		    struct json_object *q, uint32_t n, bool backward)
{
	for (uint32_t k = 0; k < n; k++) {
		struct json_object *e = json_object_array_get_idx(q, backward ? n - 1 - k : k);
		uint64_t x = json_object_get_uint64(e);

		if (!json_object_is_type(e, json_type_int) || x < a[k] || x > b[k])
			return false;
	}
	return true;
}

/* Votes of one vCPU's histograms: *fwd and *back count those that fit
 * only one way. */
static void vote(struct kvmstats_reader *r, struct json_object *stats,
		 unsigned int *fwd, unsigned int *back)
{
	const struct kvmstats_sample *a = kvmstats_reader__prev(r);
	const struct kvmstats_sample *b = kvmstats_reader__cur(r);
	size_t n = json_object_array_length(stats);

	if (!a || !b)
		return;
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(stats, i), *q;
		const char *name = ks_json_str(e, "name");
		const struct kvmstats_stat *st;
		uint32_t size;
		bool f, r2;

		if (!name || !json_object_object_get_ex(e, "value", &q) ||
		    !json_object_is_type(q, json_type_array))
			continue;
		st = kvmstats_schema__find(kvmstats_reader__schema(r), name);
		size = st ? kvmstats_stat__size(st) : 0;
		if (size < 2 || json_object_array_length(q) != size)
			continue;
		f = between(kvmstats_stat__values(st, a->data),
			    kvmstats_stat__values(st, b->data), q, size, false);
		r2 = between(kvmstats_stat__values(st, a->data),
			     kvmstats_stat__values(st, b->data), q, size, true);
		*fwd += f && !r2;
		*back += r2 && !f;
	}
}

bool ks_hist_check_end(struct ks_hist_check *c, struct json_object *vcpu_res,
		       struct json_object *cpus, struct ks_hist_order *o)
{
	unsigned int fwd = 0, back = 0;
	const char *path = NULL;
	struct json_object *stats;
	size_t i = 0;

	sweep_vcpus(c->v);
	while ((stats = ks_qmp_provider_stats(vcpu_res, NULL, &i, &path))) {
		struct kvmstats_reader *r = kernel_vcpu(c->v, cpu_index(cpus, path));

		if (r)
			vote(r, stats, &fwd, &back);
	}
	/* Empty or symmetric histograms fit both ways: no verdict. */
	if (!fwd == !back)
		return false;
	o->reversed = back > 0;
	o->from = "kernel";
	remember(c->ctx, c->pid, o->reversed);
	return true;
}
