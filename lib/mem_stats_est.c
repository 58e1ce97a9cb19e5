// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The estimators' names and the stats estimator: what KVM's own
 * pages_4k/2m/1g counters tell of a VM's zero pages (an upper bound on
 * touched memory, nothing more).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

/* ---- estimator names ---- */

static const char *const method_names[] = {
	[KVMSTATS_METHOD_STATS] = "stats",
	[KVMSTATS_METHOD_PAGEMAP] = "pagemap",
	[KVMSTATS_METHOD_SAMPLE] = "sample",
	[KVMSTATS_METHOD_SCAN] = "scan",
};

const char *kvmstats_method_str(enum kvmstats_method m)
{
	return m < KVMSTATS_METHOD_NR ? method_names[m] : "unknown";
}

int kvmstats_method_parse(const char *s)
{
	for (int i = 0; s && i < KVMSTATS_METHOD_NR; i++)
		if (!strcmp(s, method_names[i]))
			return i;
	return -EINVAL;
}

/* ---- the stats estimator ---- */

/* Sum of @name over a reader's current values; false when absent. */
static bool read_stat(struct kvmstats_reader *r, const char *const *names,
		      const uint64_t *mult, size_t n, uint64_t *sum)
{
	const struct kvmstats_schema *s = kvmstats_reader__schema(r);
	struct kvmstats_sample *smp = kvmstats_sample__new(s);
	bool found = false;

	if (!smp)
		return false;
	if (!kvmstats_reader__read(r, smp)) {
		const uint64_t *miss = kvmstats_reader__missing(r);

		for (size_t i = 0; i < n; i++) {
			const struct kvmstats_stat *st = kvmstats_schema__find(s, names[i]);
			uint32_t k;

			if (!st)
				continue;
			k = kvmstats_stat__index(st);
			if (miss && (miss[k / 64] >> (k % 64) & 1))
				continue;
			*sum += kvmstats_stat__values(st, smp->data)[0] * mult[i];
			found = true;
		}
	}
	kvmstats_sample__free(smp);
	return found;
}

int kvmstats_estimate__stats(const struct kvmstats_vmm *vmm, uint64_t ram_pages,
			     struct kvmstats_estimate *e)
{
	static const char *const pages[] = { "pages_4k", "pages_2m", "pages_1g" };
	static const uint64_t mult[] = { 1, 512, 262144 };
	static const char *const exits[] = { "exits" };
	static const uint64_t one[] = { 1 };
	uint64_t t0 = ks_now_ns(), mapped = 0, nexits = 0;
	bool have_pages = false, have_exits = false;

	if (!e)
		return -EINVAL;
	memset(e, 0, sizeof(*e));
	e->method = KVMSTATS_METHOD_STATS;
	e->pages = ram_pages;
	for (size_t i = 0; vmm && i < kvmstats_vmm__num_vms(vmm); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(vmm, i);
		int index;

		if (kvmstats_vm__reader(vm))
			have_pages |= read_stat(kvmstats_vm__reader(vm), pages, mult, 3,
						&mapped);
		for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
			have_exits |= read_stat(kvmstats_vm__vcpu(vm, k, &index), exits,
						one, 1, &nexits);
	}
	e->elapsed_s = e->cpu_s = ks_secs(ks_now_ns() - t0);
	if (!have_pages) {
		snprintf(e->note, sizeof(e->note), "no source gives this VM's "
			 "pages_4k/2m/1g");
		return 0;
	}
	if (!mapped && (nexits || !have_exits)) {
		snprintf(e->note, sizeof(e->note), "not maintained by this KVM: "
			 "pages_4k/2m/1g are 0 for a VM that has run (exits %s%" PRIu64 ")",
			 have_exits ? "" : "unknown, ", nexits);
		return 0;
	}
	e->valid = true;
	e->nonzero_pages = mapped < ram_pages ? mapped : ram_pages;
	e->zero_pages = ram_pages - e->nonzero_pages;
	e->zero_lo = (double)e->zero_pages;
	e->zero_hi = (double)ram_pages;
	snprintf(e->note, sizeof(e->note), "%" PRIu64 " pages mapped by KVM: counts "
		 "mappings, not unique pages; an upper bound on touched memory",
		 mapped);
	return 0;
}
