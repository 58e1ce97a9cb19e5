// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The vCPUs a QEMU monitor reports, kept within what the VMM can have.
 *
 * A monitor is the VMM's and says what the VMM wants: ids that no thread
 * has, negative or duplicate indexes, a new list of vCPUs at every poll.
 * So a vCPU is counted only while the VMM holds vCPU fds for it (no VMM
 * has more vCPUs than the KVM vCPU fds it holds, and none more than KVM
 * allows), its cpu-index is in KVM's range and unique, its thread-id is
 * a thread of the VMM (else the id falls back to the VMM's pid), and a
 * vCPU the monitor no longer lists is dropped. The table is sorted by
 * qom-path, so a poll of n vCPUs costs n log n, never n^2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "source_qmp.h"

#define QOM_PATH_MAX 256

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, (*(struct qmp_cpu *const *)b)->qom_path);
}

static size_t lower_bound(const struct qmp_cpus *t, const char *path)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(t->v[mid]->qom_path, path) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct qmp_cpu *ks_qmp_cpu_find(const struct qmp_cpus *t, const char *qom_path)
{
	struct qmp_cpu **c;

	if (!t->n || !qom_path)
		return NULL;
	c = bsearch(&qom_path, t->v, t->n, sizeof(*t->v), cmp_path);
	return c ? *c : NULL;
}

bool ks_qmp_cpus_news(const struct qmp_cpus *t, struct json_object *res)
{
	const char *path = NULL;
	size_t i = 0;

	while (ks_qmp_provider_stats(res, NULL, &i, &path))
		if (path && !ks_qmp_cpu_find(t, path))
			return true;
	return false;
}

unsigned int ks_qmp_vcpu_fds(pid_t pid)
{
	struct kvmstats_proc_fd *fds = NULL;
	int n = kvmstats_proc__kvm_fds(pid, &fds);
	unsigned int vcpus = 0;

	for (int i = 0; i < n; i++)
		vcpus += fds[i].kind == KVMSTATS_FD_VCPU;
	free(fds);
	return vcpus < KS_QMP_MAX_VCPUS ? vcpus : KS_QMP_MAX_VCPUS;
}

static void cpu_free(struct qmp_cpu *c)
{
	if (!c)
		return;
	free(c->qom_path);
	ks_snap_free(&c->s);
	free(c);
}

void ks_qmp_cpu_drop(struct qmp_cpus *t, struct qmp_cpu *c)
{
	size_t i = lower_bound(t, c->qom_path);

	if (i < t->n && t->v[i] == c) {
		memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(*t->v));
		t->n--;
	}
	cpu_free(c);
}

void ks_qmp_cpus_free(struct qmp_cpus *t)
{
	for (size_t i = 0; i < t->n; i++)
		cpu_free(t->v[i]);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

/* query-cpus-fast's entries, sorted by qom-path for lookups. */
struct cpu_id {
	const char *path;
	long long index, tid;
};

static int cmp_id(const void *a, const void *b)
{
	return strcmp(((const struct cpu_id *)a)->path,
		      ((const struct cpu_id *)b)->path);
}

static struct cpu_id *index_cpus(struct json_object *cpus, size_t *n)
{
	size_t len = json_object_is_type(cpus, json_type_array) ?
			     json_object_array_length(cpus) : 0, k = 0;
	struct cpu_id *ids;

	*n = 0;
	if (len > 2 * KS_QMP_MAX_VCPUS)
		len = 2 * KS_QMP_MAX_VCPUS;
	ids = calloc(len ? len : 1, sizeof(*ids));
	if (!ids)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		struct json_object *e = json_object_array_get_idx(cpus, i), *v;
		struct cpu_id *id = &ids[k];

		id->path = ks_json_str(e, "qom-path");
		if (!id->path)
			continue;
		id->index = json_object_object_get_ex(e, "cpu-index", &v) &&
			    json_object_is_type(v, json_type_int) ?
				    json_object_get_int64(v) : -1;
		id->tid = json_object_object_get_ex(e, "thread-id", &v) &&
			  json_object_is_type(v, json_type_int) ?
				  json_object_get_int64(v) : -1;
		k++;
	}
	qsort(ids, k, sizeof(*ids), cmp_id);
	*n = k;
	return ids;
}

/* cpu-indexes taken, one bit each. */
struct used {
	uint64_t w[KS_QMP_MAX_VCPU_ID / 64];
};

static bool index_used(const struct used *u, long long i)
{
	return u->w[i / 64] >> (i % 64) & 1;
}

static void use_index(struct used *u, long long i)
{
	u->w[i / 64] |= 1ull << (i % 64);
}

static bool is_thread_of(pid_t pid, long long tid)
{
	char path[64];
	struct stat st;

	if (tid <= 0 || tid > INT32_MAX)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/task/%lld", (int)pid, tid);
	return !stat(path, &st);
}

/* The ids of a new vCPU; false when it cannot be placed. */
static bool new_ids(const struct qmp_cpus *t, struct used *u,
		    const struct cpu_id *ids, size_t nids, const char *path,
		    int *index, pid_t *tid)
{
	struct cpu_id key = { .path = path };
	const struct cpu_id *id = nids ? bsearch(&key, ids, nids, sizeof(*ids),
						 cmp_id) : NULL;
	long long idx = id ? id->index : -1;

	/* Without query-cpus-fast: the lowest free index, and the VMM's
	 * pid as the creating thread. */
	if (!id) {
		for (idx = 0; idx < KS_QMP_MAX_VCPU_ID && index_used(u, idx); idx++)
			;
	}
	if (idx < 0 || idx >= KS_QMP_MAX_VCPU_ID || index_used(u, idx))
		return false;
	use_index(u, idx);
	*index = (int)idx;
	*tid = id && is_thread_of(t->pid, id->tid) ? (pid_t)id->tid : t->pid;
	return true;
}

static int add(struct qmp_cpus *t, const struct kvmstats_schema *sc,
	       const char *path, int index, pid_t tid, struct qmp_cpu **out)
{
	struct qmp_cpu *c = calloc(1, sizeof(*c));
	size_t at;

	if (!c)
		return -ENOMEM;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 8;
		void *p = realloc(t->v, cap * sizeof(*t->v));

		if (!p) {
			free(c);
			return -ENOMEM;
		}
		t->v = p;
		t->cap = cap;
	}
	c->index = index;
	c->tid = tid;
	c->qom_path = strdup(path);
	if (!c->qom_path || ks_snap_alloc(&c->s, sc)) {
		cpu_free(c);
		return -ENOMEM;
	}
	at = lower_bound(t, path);
	memmove(&t->v[at + 1], &t->v[at], (t->n - at) * sizeof(*t->v));
	t->v[at] = c;
	t->n++;
	*out = c;
	return 0;
}

int ks_qmp_cpus_update(struct qmp_cpus *t, const struct kvmstats_schema *sc,
		       struct json_object *res, struct json_object *cpus,
		       bool reversed)
{
	struct cpu_id *ids = NULL;
	struct json_object *stats;
	const char *path = NULL;
	size_t i = 0, nids = 0, seen = 0, keep = 0;
	struct used *u = calloc(1, sizeof(*u));
	int err = 0;

	if (!u)
		return -ENOMEM;
	for (size_t k = 0; k < t->n; k++) {
		t->v[k]->present = false;
		use_index(u, t->v[k]->index);
	}
	t->refused = 0;
	while (!err && (stats = ks_qmp_provider_stats(res, NULL, &i, &path)) &&
	       seen++ < 2 * KS_QMP_MAX_VCPUS) {
		struct qmp_cpu *c = ks_qmp_cpu_find(t, path);
		int index;
		pid_t tid;

		if (!c) {
			if (!ids && cpus)
				ids = index_cpus(cpus, &nids);
			if (!path || !*path || strlen(path) > QOM_PATH_MAX ||
			    t->n >= t->limit ||
			    !new_ids(t, u, ids, nids, path, &index, &tid)) {
				t->refused++;
				continue;
			}
			err = add(t, sc, path, index, tid, &c);
			if (err)
				break;
		}
		ks_snap_fill(&c->s, sc, stats, reversed);
		c->present = true;
	}
	free(ids);
	free(u);
	/* Gone from the monitor's list: dropped, unless a reader still
	 * holds it (the next refresh lets it go). */
	for (size_t k = 0; k < t->n; k++) {
		if (!t->v[k]->present && !t->v[k]->held)
			cpu_free(t->v[k]);
		else
			t->v[keep++] = t->v[k];
	}
	t->n = keep;
	return err;
}
