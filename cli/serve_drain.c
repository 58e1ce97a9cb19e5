// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats serve: the drain's gauges (--drain-link); see serve.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drain.h"
#include "serve.h"

/*
 * With --drain-link, each planning round also schedules the drain of the
 * host as `kvmstats drain --link` does (the library's scheduler, the
 * plan's order, --parallel-migrations at a time, KubeVirt's abort rule of
 * 150 s per GiB) over the VMs the round predicted, and exports the
 * predicted total and each VM's place in the schedule beside the plan's
 * per-VM gauges.
 */
#define DRAIN_ABORT_S_PER_GIB 150

struct kvmstats_drain *serve_drain(const struct plan_cfg *c,
				   struct kvmstats_plan *const *plans, size_t n)
{
	struct kvmstats_drain_vm *in = calloc(n + 1, sizeof(*in));
	struct kvmstats_drain *d = NULL;
	size_t k = 0;

	if (!in)
		return NULL;
	for (size_t i = 0; i < n; i++)
		k += !drain_input_of(plans[i],
				     kvmstats_plan__result(plans[i])->name,
				     &in[k]);
	if (k)
		d = kvmstats_drain__new(
			in, k, sizeof(*in),
			&(struct kvmstats_drain_opts){
				.sz = sizeof(struct kvmstats_drain_opts),
				.link = c->drain_link,
				.parallel = c->parallel,
				.order = KVMSTATS_DRAIN_ORDER_PLAN,
				.abort_s_per_gib = DRAIN_ABORT_S_PER_GIB});
	free(in);
	return d;
}

enum {
	DG_START,
	DG_END,
	DG_SECONDS,
	DG_POSITION,
	DG_CONVERGES,
	DG_NR,
};

static const struct {
	const char *name, *unit, *help;
} drain_gauges[DG_NR] = {
	[DG_START] = {"kvmstats_drain_scheduled_start_seconds", "seconds",
		      "When the drain schedule starts the VM's migration, "
		      "since the drain began"},
	[DG_END] = {"kvmstats_drain_scheduled_end_seconds", "seconds",
		    "When the drain schedule has the VM gone (or its "
		    "migration aborted), since the drain began"},
	[DG_SECONDS] = {"kvmstats_drain_scheduled_seconds", "seconds",
			"The VM's migration under the drain schedule, sharing "
			"the link"},
	[DG_POSITION] =
		{"kvmstats_drain_position", NULL,
		 "The VM's place in the drain's order, 1 = started first"},
	[DG_CONVERGES] =
		{"kvmstats_drain_converges", NULL,
		 "1 when the VM's migration completes under the drain "
		 "schedule, 0 when it is aborted; absent when uncertain"},
};

static double slot_value(const struct kvmstats_drain_slot *sl, int g)
{
	switch (g) {
	case DG_START:
		return sl->start_s;
	case DG_END:
		return sl->end_s;
	case DG_SECONDS:
		return sl->seconds;
	case DG_POSITION:
		return sl->position;
	default:
		return sl->uncertain ? NAN : sl->converges;
	}
}

static void render_total(struct prom_buf *b, enum prom_format f,
			 const struct kvmstats_drain_result *r)
{
	prom_family(b, f, "kvmstats_drain_predicted_seconds", "gauge",
		    "seconds",
		    "Predicted time to empty the host: every VM migrated "
		    "--parallel-migrations at a time through --drain-link");
	prom_sample(b, "kvmstats_drain_predicted_seconds", NULL, r->total_s);
	prom_family(b, f, "kvmstats_drain_predicted_low_seconds", "gauge",
		    "seconds",
		    "The drain's time at the dirty rates' low bound");
	prom_sample(b, "kvmstats_drain_predicted_low_seconds", NULL,
		    r->total_lo_s);
	prom_family(b, f, "kvmstats_drain_predicted_high_seconds", "gauge",
		    "seconds",
		    "The drain's time at the dirty rates' high bound");
	prom_sample(b, "kvmstats_drain_predicted_high_seconds", NULL,
		    r->total_hi_s);
	prom_family(b, f, "kvmstats_drain_not_converging_vms", "gauge", NULL,
		    "VMs whose migration the drain schedule aborts");
	prom_sample_u64(b, "kvmstats_drain_not_converging_vms", NULL,
			r->not_converging);
}

void render_drain(struct prom_buf *b, enum prom_format f,
		  const struct kvmstats_drain *d)
{
	const struct kvmstats_drain_result *r =
		d ? kvmstats_drain__result(d) : NULL;
	char name[4 * 128 + 1], lab[sizeof(name) + 64];

	if (!r || !r->n)
		return;
	render_total(b, f, r);
	for (int g = 0; g < DG_NR; g++) {
		prom_family(b, f, drain_gauges[g].name, "gauge",
			    drain_gauges[g].unit, drain_gauges[g].help);
		for (size_t i = 0; i < r->n; i++) {
			const struct kvmstats_drain_slot *sl =
				kvmstats_drain__slot(d, i);

			if (!sl || isnan(slot_value(sl, g)))
				continue;
			prom_escape_label(sl->name, name, sizeof(name));
			snprintf(lab, sizeof(lab), "pid=\"%d\",name=\"%s\"",
				 (int)sl->pid, name);
			prom_sample(b, drain_gauges[g].name, lab,
				    slot_value(sl, g));
		}
	}
}
