// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats plan: its output (JSON and the table), from the rows plan.c
 * planned and ranked. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sanitize.h"
#include "kvmstats_mem.h"
#include "plan.h"

/* ---- JSON ---- */

#define jset json_object_object_add
#define ju64 json_object_new_uint64
#define jstr json_object_new_string

static struct json_object *jnum(double v)
{
	return isfinite(v) ? cli_json_double(v) : NULL;
}

static struct json_object *interval_json(double lo, double hi)
{
	struct json_object *a = json_object_new_array();

	json_object_array_add(a, jnum(lo));
	json_object_array_add(a, jnum(hi));
	return a;
}

static const char *kind_str(enum kvmstats_ram_kind k)
{
	switch (k) {
	case KVMSTATS_RAM_ANON: return "anonymous";
	case KVMSTATS_RAM_SHMEM: return "shmem";
	case KVMSTATS_RAM_HUGETLB: return "hugetlb";
	case KVMSTATS_RAM_FILE: return "file";
	}
	return "unknown";
}

static struct json_object *ram_json(const struct kvmstats_ram *ram)
{
	struct json_object *o = json_object_new_object();
	struct json_object *rs = json_object_new_array();
	char buf[40];

	jset(o, "how", jstr(
		kvmstats_ram_how_str(kvmstats_ram__how(ram))));
	jset(o, "note", jstr(kvmstats_ram__note(ram)));
	jset(o, "qmp", jstr(kvmstats_ram__qmp_path(ram)));
	for (size_t i = 0; i < kvmstats_ram__count(ram); i++) {
		const struct kvmstats_ram_region *r = kvmstats_ram__region(ram, i);
		struct json_object *j = json_object_new_object();

		snprintf(buf, sizeof(buf), "%" PRIx64 "-%" PRIx64, r->start, r->start + r->len);
		jset(j, "range", jstr(buf));
		jset(j, "bytes", ju64(r->len));
		jset(j, "name", jstr(r->name));
		jset(j, "kind", jstr(kind_str(r->kind)));
		jset(j, "shared", json_object_new_boolean(r->shared));
		jset(j, "page_size", ju64(r->page_size));
		jset(j, "path", jstr(r->path));
		jset(j, "why", jstr(r->why));
		json_object_array_add(rs, j);
	}
	jset(o, "regions", rs);
	return o;
}

static struct json_object *estimate_json(const struct kvmstats_estimate *e)
{
	struct json_object *o = json_object_new_object();

	jset(o, "method", jstr(kvmstats_method_str(e->method)));
	jset(o, "valid", json_object_new_boolean(e->valid));
	jset(o, "zero_pages", e->valid ? ju64(e->zero_pages) : NULL);
	jset(o, "nonzero_pages", e->valid ? ju64(e->nonzero_pages) : NULL);
	jset(o, "unknown_pages", e->valid ? ju64(e->unknown_pages) : NULL);
	jset(o, "zero_pages_interval", e->valid ?
			       interval_json(e->zero_lo, e->zero_hi) : NULL);
	jset(o, "coverage", jnum(e->coverage));
	jset(o, "elapsed_seconds", jnum(e->elapsed_s));
	jset(o, "cpu_seconds", jnum(e->cpu_s));
	jset(o, "bytes_read", ju64(e->bytes_read));
	jset(o, "pages_tested", ju64(e->tested));
	jset(o, "missing_pages", ju64(e->missing_pages));
	jset(o, "note", jstr(e->note));
	return o;
}

static struct json_object *counts_json(const struct kvmstats_pagemap_counts *c)
{
	struct json_object *o = json_object_new_object();

	jset(o, "present", ju64(c->present));
	jset(o, "pfn_zero", ju64(c->pfn_zero));
	jset(o, "huge", ju64(c->huge));
	jset(o, "swapped", ju64(c->swapped));
	jset(o, "cached", ju64(c->cached));
	jset(o, "not_present", ju64(c->none));
	jset(o, "candidates", ju64(c->candidates));
	jset(o, "unclassified", ju64(c->unclassified));
	return o;
}

static struct json_object *dirty_json(const struct kvmstats_plan_vm *r)
{
	struct json_object *o = json_object_new_object();
	struct json_object *curve = json_object_new_array();
	const struct kvmstats_dirty_result *d = &r->dirty;

	for (uint32_t i = 0; i < d->npoints; i++) {
		struct json_object *p = json_object_new_object();

		jset(p, "t", jnum(d->points[i].t));
		jset(p, "pages", jnum(d->points[i].pages));
		jset(p, "interval", interval_json(d->points[i].lo,
								     d->points[i].hi));
		json_object_array_add(curve, p);
	}
	jset(o, "pages_per_second", jnum(d->pages_per_second));
	jset(o, "bytes_per_second", jnum(d->pages_per_second *
							   KVMSTATS_PAGE_SIZE));
	jset(o, "interval", interval_json(d->lo, d->hi));
	jset(o, "sampled_pages", ju64(d->sampled));
	jset(o, "population", ju64(d->population));
	jset(o, "new_pages", ju64(d->new_pages));
	jset(o, "missing_pages", ju64(d->missing_pages));
	jset(o, "curve", curve);
	return o;
}

/* The first pass's last pages as read (the deepest point), null when
 * not read: the model then takes them at the pass's mean. */
static struct json_object *tail_json(const struct kvmstats_plan_vm *r)
{
	const struct kvmstats_tail_point *t;
	struct json_object *j;

	if (!r->ntail)
		return NULL;
	t = &r->tail[r->ntail - 1];
	j = json_object_new_object();
	jset(j, "pages", ju64(t->pages));
	jset(j, "nonzero_pages", jnum(t->normal));
	return j;
}

static void add_prediction(struct json_object *o, const struct kvmstats_plan_vm *r)
{
	const struct kvmstats_migrate_prediction *p = &r->pred;
	struct json_object *j = json_object_new_object();

	/* null when not measured: the model then assumed a clean guest
	 * (assumed_clean), which is not a rate of 0 read off the guest */
	jset(o, "dirty_pages_per_second",
	     r->dirty_measured ? jnum(r->dirty.pages_per_second) : NULL);
	jset(o, "assumed_clean", json_object_new_boolean(p->assumed_clean));
	/* null where the point prediction does not converge: its bytes and
	 * seconds are then what the model had sent when it gave up (the
	 * note says after how many syncs), not a prediction */
	jset(o, "predicted_transfer_bytes",
	     p->converges ? ju64(p->bytes) : NULL);
	jset(o, "predicted_seconds", p->converges ? jnum(p->seconds) : NULL);
	/* null where the sample decides (the verdict says "uncertain") */
	jset(o, "converges", p->verdict == KVMSTATS_VERDICT_UNCERTAIN ? NULL :
			     json_object_new_boolean(p->verdict == KVMSTATS_VERDICT_CONVERGES));
	jset(o, "predicted_seconds_interval", interval_json(p->seconds_lo, p->seconds_hi));
	jset(o, "predicted_transfer_bytes_interval",
	     interval_json(p->bytes_lo, p->bytes_hi));
	jset(j, "verdict", jstr(kvmstats_verdict_str(p->verdict)));
	jset(j, "dirty_samples", json_object_new_int((int)p->dirty_samples));
	jset(j, "postcopy", json_object_new_boolean(p->postcopy));
	jset(j, "postcopy_seconds", p->postcopy ? jnum(p->postcopy_s) : NULL);
	jset(j, "postcopy_bytes", p->postcopy ? ju64(p->postcopy_bytes) : NULL);
	jset(j, "postcopy_bandwidth_bytes_per_second",
	     p->postcopy ? jnum(p->postcopy_bw) : NULL);
	/* (the syncs until it gave up, and no stop-and-copy, where the
	 * point does not converge: null) */
	jset(j, "passes",
	     p->converges ? json_object_new_int((int)p->passes) : NULL);
	jset(j, "first_pass_bytes", ju64(p->first_pass_bytes));
	jset(j, "first_pass_tail", tail_json(r));
	jset(j, "final_bytes", p->converges ? ju64(p->final_bytes) : NULL);
	jset(j, "downtime_seconds", p->converges ? jnum(p->downtime_s) : NULL);
	jset(j, "bandwidth_bytes_per_second", jnum(r->bandwidth));
	jset(j, "bandwidth_source", jstr(r->bandwidth_source));
	if (r->settings_note[0])
		jset(j, "settings_note", jstr(r->settings_note));
	jset(j, "downtime_limit_seconds", jnum(r->downtime_s));
	jset(j, "note", jstr(p->note));
	jset(o, "prediction", j);
}

/* The settings the model used, each with where it came from, and how it
 * ran them. */
static void add_settings(struct json_object *pred, const struct kvmstats_plan *p)
{
	const struct kvmstats_migrate_settings *s = kvmstats_plan__settings(p);
	const struct kvmstats_migrate_detail *d = kvmstats_plan__detail(p);
	const struct kvmstats_compress_estimate *c = &d->compress;
	bool conv = kvmstats_plan__result(p)->pred.converges;
	struct json_object *set = json_object_new_object(), *cj;
	char v[32];

	for (int k = 0; k < KVMSTATS_MIG_NKEYS; k++) {
		struct json_object *e = json_object_new_object();

		kvmstats_migrate_settings__value(s, (enum kvmstats_mig_key)k, v, sizeof(v));
		jset(e, "value", jstr(v));
		jset(e, "source", jstr(kvmstats_mig_src_str(s->src[k])));
		jset(set, kvmstats_mig_key_str((enum kvmstats_mig_key)k), e);
	}
	snprintf(v, sizeof(v), "%u.%u", s->qemu_major, s->qemu_minor);
	jset(pred, "qemu_version", s->qemu_major ? jstr(v) : NULL);
	jset(pred, "qemu_version_source",
	     s->qemu_major ? jstr(kvmstats_mig_src_str(s->version_src)) : NULL);
	jset(pred, "settings", set);
	jset(pred, "mechanism", jstr(d->mechanism ? d->mechanism : "legacy"));
	jset(pred, "effective_bandwidth_bytes_per_second", jnum(d->effective_bw));
	jset(pred, "link_bytes_per_second", d->link_bw > 0 ? jnum(d->link_bw) : NULL);
	cj = json_object_new_object();
	jset(cj, "count", json_object_new_int64(d->cpus));
	jset(cj, "source", jstr(d->cpus_source));
	jset(cj, "vmm_busy", isnan(d->vmm_busy) ? NULL : jnum(d->vmm_busy));
	jset(pred, "source_cpus", cj);
	jset(pred, "multifd_windows_vary",
	     s->multifd ? json_object_new_boolean(d->windows_vary) : NULL);
	/* (what it had sent when it gave up, where it does not converge) */
	jset(pred, "wire_bytes", conv ? ju64(d->wire_bytes) : NULL);
	if (c->valid || c->note[0]) {
		cj = json_object_new_object();
		jset(cj, "method", jstr(kvmstats_mig_compress_str(c->method)));
		jset(cj, "level", json_object_new_int(c->level));
		jset(cj, "sampled_pages", ju64(c->pages));
		jset(cj, "ratio", c->valid ? jnum(c->ratio) : NULL);
		jset(cj, "elapsed_seconds", jnum(c->elapsed_s));
		jset(cj, "cpu_seconds", jnum(c->cpu_s));
		jset(cj, "note", jstr(c->note));
		jset(pred, "compression", cj);
	}
	if (d->walk_rate > 0) {
		cj = json_object_new_object();
		jset(cj, "bytes_per_second", jnum(d->walk_rate));
		jset(cj, "first_pass_seconds", jnum(d->walk_s));
		jset(pred, "zero_test", cj);
	} else {
		jset(pred, "zero_test", NULL);
	}
	if (s->auto_converge) {
		jset(pred, "max_throttle_percent", json_object_new_int((int)d->max_throttle));
		jset(pred, "throttled_seconds",
		     conv ? jnum(d->throttled_s) : NULL);
	}
	jset(pred, "not_modelled", jstr(d->not_modelled));
}

static struct json_object *row_json(const struct vm_row *row, int rank)
{
	struct json_object *o = json_object_new_object();
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_estimate *e;
	struct json_object *ests;
	bool ok = r && !r->error && r->predicted;

	jset(o, "pid", json_object_new_int((int)row->pid));
	jset(o, "name", jstr(row->name));
	jset(o, "rank", ok ? json_object_new_int(rank) : NULL);
	if (!r) {		/* res is set exactly when p is */
		jset(o, "error", jstr(row->error));
		return o;
	}
	jset(o, "memory_bytes", ju64(r->memory_bytes));
	jset(o, "pages", ju64(r->pages));
	jset(o, "missing_pages", ju64(r->missing_pages));
	if (ok) {
		e = &r->est[r->method];
		jset(o, "method", jstr(
					       kvmstats_method_str(r->method)));
		jset(o, "zero_pages", ju64(e->zero_pages));
		jset(o, "nonzero_pages", ju64(e->nonzero_pages));
		jset(o, "unknown_pages", ju64(e->unknown_pages));
		jset(o, "zero_pages_interval",
				       interval_json(e->zero_lo, e->zero_hi));
		/* (no pages: no ratio, null) */
		jset(o, "zero_ratio", jnum(e->pages ? (double)e->zero_pages /
								       (double)e->pages : NAN));
		jset(o, "coverage", jnum(e->coverage));
		add_prediction(o, r);
		add_settings(json_object_object_get(o, "prediction"), row->p);
	}
	jset(o, "elapsed_seconds", jnum(r->elapsed_s));
	ests = json_object_new_array();
	for (int m = 0; m < KVMSTATS_METHOD_NR; m++)
		if (r->done & (1u << m))
			json_object_array_add(ests, estimate_json(&r->est[m]));
	jset(o, "estimates", ests);
	jset(o, "dirty", r->dirty_measured ? dirty_json(r) : NULL);
	jset(o, "pagemap", counts_json(&r->counts));
	jset(o, "ram", ram_json(kvmstats_plan__ram(row->p)));
	if (r->error)
		jset(o, "error", jstr(r->error_msg));
	return o;
}

void plan_print_json(struct cli *cli, struct vm_row *rows, size_t n)
{
	struct json_object *root = json_object_new_object();
	struct json_object *vms = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		json_object_array_add(vms, row_json(&rows[i], (int)i + 1));
	jset(root, "vms", vms);
	cli_print_json(cli, root);
	json_object_put(root);
}

/* ---- table ---- */

static void human_bytes(double b, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;

	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void human_secs(double s, char *buf, size_t len)
{
	if (!isfinite(s))
		snprintf(buf, len, "-");
	else if (s < 1e-3)
		snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.0f ms", s * 1e3);
	else
		snprintf(buf, len, "%.2f s", s);
}

/* The zero share as a bar of @w cells. */
static void zero_bar(double share, int w, char *buf, size_t len)
{
	int full = (int)lround(share * w);
	size_t used = 0;

	for (int i = 0; i < w && used + 4 < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s",
					 i < full ? "\u2588" : "\u00b7");
}

static const char *conv_str(enum kvmstats_verdict v)
{
	return v == KVMSTATS_VERDICT_CONVERGES ? "yes" :
	       v == KVMSTATS_VERDICT_NO ? "NO" : "?";
}

static void print_row(const struct vm_row *row, int rank)
{
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_estimate *e;
	char mem[16], bar[64], dirty[20], xfer[16], secs[16], cost[16];
	double share;

	if (!row->p || r->error || !r->predicted) {
		/* (the reason is on stderr, once) */
		printf("%-4s %-7d %-16.16s not planned: see the error\n", "-",
		       (int)row->pid, safe_str(row->name));
		return;
	}
	e = &r->est[r->method];
	share = e->pages ? (double)e->zero_pages / (double)e->pages : 0;
	human_bytes((double)r->memory_bytes, mem, sizeof(mem));
	zero_bar(share, 12, bar, sizeof(bar));
	if (r->dirty_measured)
		human_bytes(r->dirty.pages_per_second * KVMSTATS_PAGE_SIZE, dirty,
			    sizeof(dirty) - 2);
	else
		snprintf(dirty, sizeof(dirty), "clean?");
	if (r->dirty_measured)
		strcat(dirty, "/s");
	/* "-" where the point does not converge: the model's figures are
	 * then where it gave up */
	if (r->pred.converges)
		human_bytes((double)r->pred.bytes, xfer, sizeof(xfer));
	else
		snprintf(xfer, sizeof(xfer), "-");
	human_secs(r->pred.converges ? r->pred.seconds : NAN, secs,
		   sizeof(secs));
	human_secs(r->elapsed_s, cost, sizeof(cost));
	printf("%-4d %-7d %-16.16s %10s %-7s %5.1f%% %5.1f%% %s %12s %10s %9s %-4s %9s\n",
	       rank, (int)r->pid, safe_str(r->name), mem, kvmstats_method_str(r->method),
	       100 * e->coverage, 100 * share, bar, dirty, xfer, secs,
	       conv_str(r->pred.verdict), cost);
}

/* Where QEMU's monitor was not read: what the settings are instead. */
static void print_not_read(const struct vm_row *row)
{
	const struct kvmstats_migrate_settings *s = kvmstats_plan__settings(row->p);

	if (s->qemu_major && s->version_src == KVMSTATS_MIG_SRC_QMP)
		return;
	printf("\npid %d: QEMU's migration settings were not read: %s; the "
	       "options over them%s\n", (int)row->pid,
	       row->res->settings_note[0] ? safe_str(row->res->settings_note) : "no QMP",
	       s->qemu_major ? "" : "; its version unknown, QEMU 7.2's ways");
}

/* -v: the settings the model used and where each came from. */
static void print_settings(const struct kvmstats_plan *p)
{
	const struct kvmstats_plan_vm *r = kvmstats_plan__result(p);
	const struct kvmstats_migrate_settings *s = kvmstats_plan__settings(p);
	const struct kvmstats_migrate_detail *d = kvmstats_plan__detail(p);
	char v[32];

	if (s->qemu_major)
		printf("  migration: %s, QEMU %u.%u (%s), at %.1f MiB/s\n", d->mechanism,
		       s->qemu_major, s->qemu_minor, kvmstats_mig_src_str(s->version_src),
		       d->effective_bw / 1048576.0);
	else
		printf("  migration: %s, QEMU version unknown (7.2 assumed), at %.1f MiB/s\n",
		       d->mechanism, d->effective_bw / 1048576.0);
	for (int k = 0; k < KVMSTATS_MIG_NKEYS; k++) {
		kvmstats_migrate_settings__value(s, (enum kvmstats_mig_key)k, v, sizeof(v));
		printf("    %-26s %-12s (%s)\n", kvmstats_mig_key_str((enum kvmstats_mig_key)k),
		       v, kvmstats_mig_src_str(s->src[k]));
	}
	if (d->link_bw > 0)
		printf("  link: %.1f MiB/s (--link): the stop-and-copy%s\n",
		       d->link_bw / 1048576.0,
		       s->postcopy && !s->postcopy_bw ? " and post-copy" : "");
	else
		printf("  link: not known (--link): the stop-and-copy at max-bandwidth\n");
	printf("  CPUs for the migration's threads: %u (%s)", d->cpus,
	       d->cpus_source && !strcmp(d->cpus_source, "affinity") ? "the VMM's affinity" : "this host's");
	if (!isnan(d->vmm_busy))
		printf("; the VMM kept %.2f busy", d->vmm_busy);
	printf("\n");
	if (s->multifd && d->windows_vary)
		printf("  multifd: busy vCPUs share those CPUs: each window's packets "
		       "in flight vary (the median of many draws)\n");
	if (r->ntail)
		printf("  first pass ends on: %.0f of its last %" PRIu64 " pages with "
		       "data (what its first sync leaves)\n",
		       r->tail[r->ntail - 1].normal, r->tail[r->ntail - 1].pages);
	else
		printf("  first pass ends on: not read (its pages at the pass's mean)\n");
	if (d->compress.note[0])
		printf("  compression: %s\n", d->compress.note);
	if (d->walk_rate > 0)
		printf("  zero test: QEMU's of the first pass, %.2f s at %.0f MB/s "
		       "(this host's, as the scan ran)\n", d->walk_s, d->walk_rate / 1e6);
	else
		printf("  zero test: not modelled (no scan timed it, an ASan build, or QEMU tests no page)\n");
	if (s->auto_converge && r->pred.converges)
		printf("  auto-converge: the guest's vCPUs throttled up to %u%% for %.2f s\n",
		       d->max_throttle, d->throttled_s);
	else if (s->auto_converge)
		printf("  auto-converge: the guest's vCPUs throttled up to "
		       "%u%%, and still it does not converge\n",
		       d->max_throttle);
	if (d->not_modelled[0])
		printf("  not modelled: %s\n", d->not_modelled);
}

/* -v: the verdict and the intervals the inputs' uncertainty gives. */
static void print_verdict(const struct kvmstats_plan_vm *r)
{
	const struct kvmstats_migrate_prediction *p = &r->pred;
	char s0[16], s1[16], b0[16], b1[16];

	human_secs(p->seconds_lo, s0, sizeof(s0));
	human_secs(p->seconds_hi, s1, sizeof(s1));
	human_bytes(p->bytes_lo, b0, sizeof(b0));
	human_bytes(p->bytes_hi, b1, sizeof(b1));
	printf("  verdict: %s after %u dirty-rate interval(s); time [%s .. %s], "
	       "transfer [%s .. %s]%s\n", kvmstats_verdict_str(p->verdict),
	       p->dirty_samples, s0, s1, isnan(p->bytes_lo) ? "-" : b0,
	       isnan(p->bytes_hi) ? "-" : b1,
	       isnan(p->seconds_hi) && !isnan(p->seconds_lo) ?
		       " (- : the high bound does not converge)" : "");
	if (!p->postcopy)
		return;
	human_secs(p->postcopy_s, s0, sizeof(s0));
	printf("  post-copy: %s with the guest on the destination, faulting in "
	       "%.1f MiB from the source at %.1f MiB/s\n", s0,
	       (double)p->postcopy_bytes / 1048576.0, p->postcopy_bw / 1048576.0);
}

static void print_estimates(const struct vm_row *row, bool verbose)
{
	const struct kvmstats_plan_vm *r = row->res;
	const struct kvmstats_ram *ram = kvmstats_plan__ram(row->p);
	char t[16], c[16];

	printf("\npid %d %s: %zu RAM region(s) via %s%s%s\n", (int)r->pid,
	       safe_str(r->name), kvmstats_ram__count(ram),
	       kvmstats_ram_how_str(kvmstats_ram__how(ram)),
	       kvmstats_ram__note(ram)[0] ? " - " : "", safe_str(kvmstats_ram__note(ram)));
	for (size_t i = 0; verbose && i < kvmstats_ram__count(ram); i++) {
		const struct kvmstats_ram_region *g = kvmstats_ram__region(ram, i);

		printf("  %" PRIx64 "-%" PRIx64 " %-22s %s\n", g->start, g->start + g->len,
		       safe_str(g->name), safe_str(g->why));
	}
	printf("  %-8s %7s %-27s %8s %10s %10s  %s\n", "METHOD", "ZERO", "  (95% / bounds)",
	       "COVERAGE", "TIME", "CPU", "NOTE");
	for (int m = 0; m < KVMSTATS_METHOD_NR; m++) {
		const struct kvmstats_estimate *e = &r->est[m];
		double pg = e->pages ? (double)e->pages : 1;

		if (!(r->done & (1u << m)))
			continue;
		human_secs(e->elapsed_s, t, sizeof(t));
		human_secs(e->cpu_s, c, sizeof(c));
		if (!e->valid) {
			printf("  %-8s %7s %-27s %8s %10s %10s  %s\n",
			       kvmstats_method_str(e->method), "-", "", "-", t, c, e->note);
			continue;
		}
		printf("  %-8s %6.2f%%  [%6.2f%% .. %6.2f%%]       %7.1f%% %10s %10s  %s\n",
		       kvmstats_method_str(e->method), 100 * (double)e->zero_pages / pg,
		       100 * e->zero_lo / pg, 100 * e->zero_hi / pg, 100 * e->coverage, t, c,
		       e->note);
	}
	if (r->dirty_measured)
		printf("  dirty: %.0f pages/s [%.0f .. %.0f] (%.1f MiB/s), %" PRIu64
		       " pages sampled\n", r->dirty.pages_per_second, r->dirty.lo, r->dirty.hi,
		       r->dirty.pages_per_second * KVMSTATS_PAGE_SIZE / 1048576.0,
		       r->dirty.sampled);
	if (r->predicted)
		printf("  model: %s at %.0f MiB/s (%s), downtime limit %.0f ms\n", r->pred.note,
		       r->bandwidth / 1048576.0, r->bandwidth_source, r->downtime_s * 1e3);
	if (r->predicted && verbose)
		print_verdict(r);
	if (r->predicted && verbose)
		print_settings(row->p);
}

/* Pages the VMM took away while the plan read them: unknown, so said. */
static void print_missing(const struct vm_row *rows, size_t n)
{
	bool first = true;

	for (size_t i = 0; i < n; i++) {
		const struct kvmstats_plan_vm *r = rows[i].res;
		char b[16];

		if (!rows[i].p || !r->missing_pages)
			continue;
		human_bytes((double)r->missing_pages * KVMSTATS_PAGE_SIZE, b, sizeof(b));
		printf("%spid %d: %" PRIu64 " pages (%s, %.2f%% of its RAM) went "
		       "missing while the plan read them (the VMM took them away); "
		       "counted as unknown\n", first ? "\n" : "", (int)r->pid,
		       r->missing_pages, b, r->pages ? 100.0 * (double)r->missing_pages /
		       (double)r->pages : 0);
		first = false;
	}
}

/* What a "?" in CONV means, once, when there is one. */
static void print_uncertain(const struct vm_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct kvmstats_plan_vm *r = rows[i].res;

		if (!rows[i].p || r->error || !r->predicted ||
		    r->pred.verdict != KVMSTATS_VERDICT_UNCERTAIN)
			continue;
		printf("\nCONV ?: whether the migration converges depends on the "
		       "dirty-rate sample's error, even measured longer; -v shows "
		       "the time and transfer at its bounds\n");
		return;
	}
}

void plan_print_table(struct cli *cli, const struct plan_args *a,
		      struct vm_row *rows, size_t n)
{
	bool detail = cli->verbose > 0 || __builtin_popcount(a->pc.methods) > 1;

	if (!n) {
		if (!a->t.npids && target_warn_hidden(cli))
			printf("no VMM visible to uid %d; other users' VMMs are "
			       "hidden from it (run as root to see them)\n",
			       (int)geteuid());
		else
			printf("no VMM found; see 'kvmstats list'\n");
		return;
	}
	printf("%-4s %-7s %-16s %10s %-7s %6s %6s %-12s %12s %10s %9s %-4s %9s\n", "RANK",
	       "PID", "NAME", "MEMORY", "METHOD", "COVER", "ZERO", "", "DIRTY", "TRANSFER",
	       "TIME", "CONV", "PLAN_TOOK");
	for (size_t i = 0; i < n; i++)
		print_row(&rows[i], (int)i + 1);
	for (size_t i = 0; detail && i < n; i++)
		if (rows[i].p)
			print_estimates(&rows[i], cli->verbose > 0);
	for (size_t i = 0; i < n; i++)
		if (rows[i].p && rows[i].res->predicted)
			print_not_read(&rows[i]);
	for (size_t i = 0; i < n; i++)
		if (rows[i].p && rows[i].res->predicted &&
		    kvmstats_plan__detail(rows[i].p)->not_modelled[0])
			printf("\npid %d: on but not modelled: %s\n", (int)rows[i].pid,
			       kvmstats_plan__detail(rows[i].p)->not_modelled);
	print_missing(rows, n);
	print_uncertain(rows, n);
	if (a->pc.interval == 0)
		printf("\n--interval 0: no dirty rate measured; the model assumed clean guests\n");
}
