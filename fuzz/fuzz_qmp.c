// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * libFuzzer harness for what a QEMU monitor answers kvmstats' qmp source
 * (lib/qmp_schema.c, lib/qmp_cpus.c), which a VMM writes as it likes.
 * The input is up to four JSON texts separated by NULs, the return values
 * of query-stats-schemas, query-stats of the VM, query-stats of the vCPUs
 * and query-cpus-fast, parsed as the QMP client parses (ks_qmp_tokener()).
 * They go the way source_qmp.c takes them: the costs of the descriptors,
 * a schema per target sized by the first values, the VM's snapshot in
 * both orders, two polls of the vCPUs; then every value is decoded.
 *
 * Beyond "no crash", what the library promises of a hostile monitor is
 * checked: the budget a descriptor list grants is capped; a schema holds at most 1024 stats and 16 KiB of data, names
 * that are stat names and unique, histograms of at most 256 buckets;
 * the vCPUs kept are at most the limit, with unique qom-paths (sorted)
 * and unique cpu-indexes in KVM's range, each thread the VMM's own.
 * Run by tests/integration/fuzz.sh for a bounded time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source_qmp.h"

enum { SCHEMAS, VM, VCPU, CPUS, PARTS };

#define MAX_STATS 1024
#define MAX_DATA (16u << 10)
#define MAX_BUCKETS 256
#define VCPU_LIMIT 64
/* The most json-c cost a descriptor list may grant one target's answer
 * (lib/qmp_schema.c): 4096, 1200 per descriptor and 100 per value, at
 * most 1024 descriptors and 16 KiB of values. */
#define MAX_LIST_COST (4096 + 1024 * 1200 + (MAX_DATA / 8) * 100)
#define NAME_CHARS \
	"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"

static struct json_object *parse(const uint8_t *p, size_t n)
{
	struct json_tokener *tok = ks_qmp_tokener();
	struct json_object *o;

	if (!tok)
		return NULL;
	o = json_tokener_parse_ex(tok, (const char *)p, (int)n);
	json_tokener_free(tok);
	return o;
}

static void check_schema(const struct kvmstats_schema *sc)
{
	const struct kvmstats_stat *st;

	if (kvmstats_schema__num_stats(sc) > MAX_STATS ||
	    kvmstats_schema__data_size(sc) > MAX_DATA)
		abort();
	kvmstats_schema__for_each(st, sc) {
		const char *name = kvmstats_stat__name(st);
		unsigned int type = kvmstats_stat__type(st);

		if (!*name || strspn(name, NAME_CHARS) != strlen(name))
			abort();
		if (kvmstats_schema__find(sc, name) != st)
			abort();	/* a name listed twice was kept */
		if ((type == KVMSTATS_TYPE_LINEAR_HIST ||
		     type == KVMSTATS_TYPE_LOG_HIST) &&
		    kvmstats_stat__size(st) > MAX_BUCKETS)
			abort();
	}
}

/* Every value of @data, as the views decode it. */
static void decode(const struct kvmstats_schema *sc, const uint64_t *data)
{
	const struct kvmstats_stat *st;
	char buf[64];

	kvmstats_schema__for_each(st, sc) {
		const uint64_t *v = kvmstats_stat__values(st, data);
		double lo, hi;

		kvmstats_stat__format(st, (double)v[0], buf, sizeof(buf));
		kvmstats_stat__rate(st, data, data, 1);
		if (kvmstats_hist__bucket_bounds(st, 0, &lo, &hi))
			continue;
		kvmstats_hist__count(st, v);
		kvmstats_hist__quantile(st, v, 0.5);
	}
}

static struct kvmstats_schema *schema_of(struct kvmstats_ctx *ctx,
					 struct json_object **j,
					 const char *target, int part)
{
	struct json_object *list, *values;
	char err[256];
	size_t i = 0;

	list = ks_qmp_provider_stats(j[SCHEMAS], target, &i, NULL);
	if (ks_qmp_cost_of_list(list) > MAX_LIST_COST)
		abort();	/* a monitor's list raised its own budget */
	i = 0;
	values = ks_qmp_provider_stats(j[part], NULL, &i, NULL);
	if (!list || !values)
		return NULL;
	return ks_qmp_schema(ctx, list, values, "kvm-fuzz", part == VCPU, err,
			     sizeof(err));
}

static void vm_snapshot(const struct kvmstats_schema *sc,
			struct json_object *res)
{
	struct json_object *stats;
	struct snap s = { 0 };
	size_t i = 0;

	stats = ks_qmp_provider_stats(res, NULL, &i, NULL);
	if (!stats || ks_snap_alloc(&s, sc))
		goto out;
	for (int reversed = 0; reversed < 2; reversed++) {
		ks_snap_fill(&s, sc, stats, reversed);
		decode(sc, s.data);
	}
out:
	ks_snap_free(&s);
}

static void check_cpus(const struct qmp_cpus *t)
{
	if (t->n > t->limit)
		abort();
	for (size_t k = 0; k < t->n; k++) {
		const struct qmp_cpu *c = t->v[k];

		if (c->index < 0 || c->index >= KS_QMP_MAX_VCPU_ID ||
		    (c->tid != t->pid && c->tid != gettid()))
			abort();
		if (k && strcmp(t->v[k - 1]->qom_path, c->qom_path) >= 0)
			abort();	/* sorted, each path once */
		for (size_t m = 0; m < k; m++)
			if (t->v[m]->index == c->index)
				abort();
	}
}

static void vcpu_polls(const struct kvmstats_schema *sc,
		       struct json_object *res, struct json_object *cpus)
{
	struct qmp_cpus t = { .pid = getpid(), .limit = VCPU_LIMIT };

	for (int poll = 0; poll < 2; poll++) {
		if (ks_qmp_cpus_update(&t, sc, res, poll ? NULL : cpus, poll))
			break;
		check_cpus(&t);
		if (ks_qmp_cpus_news(&t, res) && !t.refused)
			abort();	/* a vCPU listed and neither kept nor refused */
		for (size_t k = 0; k < t.n; k++)
			decode(sc, t.v[k]->s.data);
	}
	ks_qmp_cpus_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* One for the run: it caches this kernel's schemas (if any). */
	static struct kvmstats_ctx *ctx;
	struct json_object *j[PARTS] = { NULL };
	struct kvmstats_schema *vm, *vcpu;
	size_t at = 0;

	if (!ctx)
		ctx = kvmstats_ctx__new(NULL);
	for (int k = 0; k < PARTS && at < size; k++) {
		const uint8_t *end = memchr(data + at, 0, size - at);
		size_t n = end ? (size_t)(end - data) - at : size - at;

		j[k] = parse(data + at, n);
		at += n + 1;
	}
	vm = schema_of(ctx, j, "vm", VM);
	vcpu = schema_of(ctx, j, "vcpu", VCPU);
	if (vm) {
		check_schema(vm);
		vm_snapshot(vm, j[VM]);
	}
	if (vcpu) {
		check_schema(vcpu);
		vcpu_polls(vcpu, j[VCPU], j[CPUS]);
	}
	kvmstats_schema__put(vm);
	kvmstats_schema__put(vcpu);
	for (int k = 0; k < PARTS; k++)
		json_object_put(j[k]);
	return 0;
}
