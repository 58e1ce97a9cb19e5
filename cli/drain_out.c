// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats drain's output: the schedule as a table and its bottom line,
 * or as JSON for an orchestrator (and for `plan --follow` to score: each
 * VM's scheduled start and end, predicted seconds and bytes).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "drain.h"
#include "sanitize.h"

#define MIB 1048576.0

static const struct drain_vm *vm_of(const struct drain_vm *vms, size_t n,
				    const struct kvmstats_drain_slot *s)
{
	for (size_t i = 0; i < n; i++)
		if (vms[i].input == (int)s->index)
			return &vms[i];
	return NULL;
}

static const char *verdict(const struct kvmstats_drain_slot *s)
{
	if (s->uncertain)
		return "uncertain";
	return s->converges ? "converges" : s->aborted ? "aborted" : "never";
}

/* ---- JSON ---- */

#define jset json_object_object_add

/* Unknown or endless is null, never a number we did not compute. */
static struct json_object *jnum(double v)
{
	return isfinite(v) ? cli_json_double(v) : NULL;
}

static struct json_object *jpair(double lo, double hi)
{
	struct json_object *a = json_object_new_array();

	json_object_array_add(a, jnum(lo));
	json_object_array_add(a, jnum(hi));
	return a;
}

static struct json_object *shares_json(const struct kvmstats_drain_slot *s)
{
	struct json_object *a = json_object_new_array();

	for (uint32_t i = 0; i < s->nsegs; i++) {
		struct json_object *o = json_object_new_object();

		jset(o, "from_s", jnum(s->segs[i].from_s));
		jset(o, "to_s", jnum(s->segs[i].to_s));
		jset(o, "bytes_per_second", jnum(s->segs[i].bandwidth));
		jset(o, "limited_by", json_object_new_string(
					      kvmstats_drain_limit_str(s->segs[i].by)));
		json_object_array_add(a, o);
	}
	return a;
}

/* What would move a VM that does not converge. */
static struct json_object *remedy_json(const struct kvmstats_drain_slot *s,
				       const struct drain_vm *v)
{
	struct json_object *o = json_object_new_object(), *ac = NULL;

	jset(o, "downtime_s", s->downtime_needed_s > 0 ? jnum(s->downtime_needed_s) : NULL);
	jset(o, "dirty_bytes_per_second_below",
	     s->quiet_dirty_bps > 0 ? jnum(s->quiet_dirty_bps) : NULL);
	jset(o, "dirty_bytes_per_second", jnum(s->dirty_bps));
	if (v && v->ac_tried) {
		ac = json_object_new_object();
		jset(ac, "converges", json_object_new_boolean(v->ac_converges));
		jset(ac, "predicted_seconds", v->ac_converges ? jnum(v->ac_seconds) : NULL);
		jset(ac, "max_throttle_percent", json_object_new_int((int)v->ac_throttle));
		/* (until the model gave up, where it does not converge) */
		jset(ac, "throttled_s",
		     v->ac_converges ? jnum(v->ac_throttled_s) : NULL);
	}
	jset(o, "auto_converge", ac);
	jset(o, "postcopy", json_object_new_string("not modelled: post-copy always "
						   "completes, after one pre-copy pass"));
	return o;
}

static struct json_object *slot_json(const struct kvmstats_drain_slot *s,
				     const struct drain_vm *v)
{
	struct json_object *o = json_object_new_object(), *al = json_object_new_object();
	/* Neither done nor aborted: it never ends, and what it had sent when
	 * the schedule stopped is no prediction. An aborted one's figures
	 * are its abort's, which the schedule predicts. */
	bool ends = s->converges || s->aborted;
	char name[512];

	str_escape(name, sizeof(name), s->name);
	jset(o, "pid", json_object_new_int(s->pid));
	jset(o, "name", json_object_new_string(name));
	jset(o, "position", json_object_new_int((int)s->position));
	jset(o, "memory_bytes", v ? json_object_new_uint64(v->res->memory_bytes) : NULL);
	jset(o, "scheduled_start_s", jnum(s->start_s));
	jset(o, "scheduled_end_s", jnum(s->end_s));
	jset(o, "scheduled_end_interval_s", jpair(s->end_lo_s, s->end_hi_s));
	jset(o, "predicted_seconds", jnum(s->seconds));
	jset(o, "predicted_transfer_bytes",
	     ends ? json_object_new_uint64(s->bytes) : NULL);
	jset(o, "passes", ends ? json_object_new_int((int)s->passes) : NULL);
	jset(o, "converges", json_object_new_boolean(s->converges));
	jset(o, "verdict", json_object_new_string(verdict(s)));
	jset(o, "aborted", json_object_new_boolean(s->aborted));
	jset(o, "abort_after_s", s->abort_after_s >= 0 ? jnum(s->abort_after_s) : NULL);
	jset(o, "limited_by", json_object_new_string(kvmstats_drain_limit_str(s->limit)));
	jset(o, "own_max_bandwidth", v ? jnum(v->res->bandwidth) : NULL);
	jset(o, "own_max_bandwidth_source", v ? json_object_new_string(v->res->bandwidth_source) : NULL);
	if (v && v->res->settings_note[0])
		jset(o, "settings_note", json_object_new_string(v->res->settings_note));
	jset(o, "shares", shares_json(s));
	/* Alone there is no abort: where it does not converge, the model's
	 * figures are where it gave up, null. */
	jset(al, "predicted_seconds",
	     s->alone.converges ? jnum(s->alone.seconds) : NULL);
	jset(al, "predicted_transfer_bytes",
	     s->alone.converges ? json_object_new_uint64(s->alone.bytes)
				: NULL);
	jset(al, "converges", json_object_new_boolean(s->alone.converges));
	jset(o, "alone", al);
	jset(o, "would_move", s->converges && !s->uncertain ? NULL : remedy_json(s, v));
	return o;
}

static void print_json(struct cli *cli, const struct drain_args *a,
		       const struct kvmstats_drain *d, const struct drain_vm *vms,
		       size_t n)
{
	const struct kvmstats_drain_result *r = kvmstats_drain__result(d);
	struct json_object *o = json_object_new_object(), *arr = json_object_new_array();
	struct json_object *nc = json_object_new_array(), *failed = json_object_new_array();

	jset(o, "link_bytes_per_second", jnum(a->link));
	jset(o, "parallel_migrations", json_object_new_int((int)a->parallel));
	jset(o, "order", json_object_new_string(kvmstats_drain_order_str(
				 (enum kvmstats_drain_order)a->order)));
	jset(o, "search", r ? json_object_new_string(kvmstats_drain_search_str(r->search))
			    : NULL);
	jset(o, "orders_tried", r ? json_object_new_uint64(r->orders_tried) : NULL);
	jset(o, "abort_seconds_per_gib", a->abort > 0 ? jnum(a->abort) : NULL);
	jset(o, "drain_seconds", r ? jnum(r->total_s) : NULL);
	jset(o, "drain_seconds_interval", r ? jpair(r->total_lo_s, r->total_hi_s) : NULL);
	jset(o, "mean_seconds_until_gone", r ? jnum(r->mean_end_s) : NULL);
	for (size_t i = 0; r && i < r->n; i++) {
		const struct kvmstats_drain_slot *s = kvmstats_drain__slot(d, i);

		json_object_array_add(arr, slot_json(s, vm_of(vms, n, s)));
		if (!s->converges || s->uncertain)
			json_object_array_add(nc, json_object_new_int(s->pid));
	}
	for (size_t i = 0; i < n; i++) {
		struct json_object *f;
		char msg[512];

		if (vms[i].input >= 0)
			continue;
		f = json_object_new_object();
		str_escape(msg, sizeof(msg), vms[i].p ? vms[i].res->error_msg : vms[i].error);
		jset(f, "pid", json_object_new_int(vms[i].pid));
		jset(f, "error", json_object_new_string(msg));
		json_object_array_add(failed, f);
	}
	jset(o, "vms", arr);
	jset(o, "not_converging", nc);
	jset(o, "failed", failed);
	cli_print_json(cli, o);
	json_object_put(o);
}

/* ---- text ---- */

static void human_secs(double s, char *buf, size_t len)
{
	if (!isfinite(s))
		snprintf(buf, len, "never");
	else if (s < 60)
		snprintf(buf, len, "%.1f s", s);
	else if (s < 3600)
		snprintf(buf, len, "%d min %d s", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%d h %d min", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void print_row(const struct kvmstats_drain_slot *s)
{
	char name[64], st[32], en[32], tm[32], share[32];

	str_escape(name, sizeof(name), s->name);
	human_secs(s->start_s, st, sizeof(st));
	human_secs(s->end_s, en, sizeof(en));
	human_secs(s->seconds, tm, sizeof(tm));
	if (fabs(s->max_share - s->min_share) < 0.05 * MIB)
		snprintf(share, sizeof(share), "%.1f", s->max_share / MIB);
	else
		snprintf(share, sizeof(share), "%.1f-%.1f", s->min_share / MIB,
			 s->max_share / MIB);
	printf("%5u %8d %-16.16s %12s %12s %12s %-5s %11s  %s\n", s->position, (int)s->pid,
	       name, st, en, tm, kvmstats_drain_limit_str(s->limit), share,
	       s->uncertain ? "uncertain" : s->converges ? "yes" : "NO (aborted)");
}

static void print_shares(const struct kvmstats_drain_slot *s)
{
	printf("      pid %d:", (int)s->pid);
	for (uint32_t i = 0; i < s->nsegs; i++)
		printf("%s %.1f-%.1f s %.1f MiB/s (%s)", i ? "," : "", s->segs[i].from_s,
		       s->segs[i].to_s, s->segs[i].bandwidth / MIB,
		       kvmstats_drain_limit_str(s->segs[i].by));
	printf("\n");
}

/* "vm3 (pid 12, aborted after 37.5 s; would move with: ...)" */
static void print_stuck(const struct kvmstats_drain_slot *s, const struct drain_vm *v)
{
	char name[64], t[32];

	str_escape(name, sizeof(name), s->name);
	human_secs(s->seconds, t, sizeof(t));
	printf("  %s (pid %d): %s %s;", name, (int)s->pid,
	       s->uncertain ? "uncertain, under the schedule" :
	       s->aborted ? "aborted after" : "runs for", t);
	if (!s->alone.converges)
		printf(" does not converge alone either;");
	else
		printf(" converges alone in %.1f s: a larger share would do;", s->alone.seconds);
	printf(" would move with:");
	if (v && v->ac_tried && v->ac_converges)
		printf(" auto-converge (%.1f s, vCPUs throttled up to %u%% for %.1f s),",
		       v->ac_seconds, v->ac_throttle, v->ac_throttled_s);
	if (s->downtime_needed_s > 0)
		printf(" a downtime-limit of %.0f ms,", s->downtime_needed_s * 1e3);
	if (s->quiet_dirty_bps > 0)
		printf(" a quieter moment (dirtying under %.1f MiB/s; now %.1f),",
		       s->quiet_dirty_bps / MIB, s->dirty_bps / MIB);
	printf(" postcopy (not modelled)\n");
}

static void bottom_line(const struct kvmstats_drain *d, const struct drain_vm *vms,
			size_t n)
{
	const struct kvmstats_drain_result *r = kvmstats_drain__result(d);
	char tot[32], lo[32], hi[32];
	size_t bad = 0;

	human_secs(r->total_s, tot, sizeof(tot));
	human_secs(r->total_lo_s, lo, sizeof(lo));
	human_secs(r->total_hi_s, hi, sizeof(hi));
	for (size_t i = 0; i < r->n; i++)
		bad += !kvmstats_drain__slot(d, i)->converges ||
		       kvmstats_drain__slot(d, i)->uncertain;
	if (!bad) {
		printf("\nhost empty in %s [%s .. %s]\n", tot, lo, hi);
		return;
	}
	printf("\ndrain over in %s [%s .. %s], but the host is not empty: "
	       "%zu VM%s will not converge, or may not:\n", tot, lo, hi, bad,
	       bad > 1 ? "s" : "");
	for (size_t i = 0; i < r->n; i++) {
		const struct kvmstats_drain_slot *s = kvmstats_drain__slot(d, i);

		if (!s->converges || s->uncertain)
			print_stuck(s, vm_of(vms, n, s));
	}
}

static void print_text(struct cli *cli, const struct drain_args *a,
		       const struct kvmstats_drain *d, const struct drain_vm *vms,
		       size_t n)
{
	const struct kvmstats_drain_result *r = kvmstats_drain__result(d);

	if (!r)
		return;
	printf("drain of %zu VM%s through %.1f MiB/s, %u migration%s at a time; "
	       "order: %s", r->n, r->n > 1 ? "s" : "", a->link / MIB, r->parallel,
	       r->parallel > 1 ? "s" : "", kvmstats_drain_order_str(r->order));
	if (r->search == KVMSTATS_DRAIN_EXHAUSTIVE)
		printf(" (the shortest drain: all %llu orders tried; ties: cheapest first)",
		       (unsigned long long)r->orders_tried);
	else if (r->search == KVMSTATS_DRAIN_GREEDY)
		printf(" (greedy: longest first, then %llu swaps tried; not proven shortest)",
		       (unsigned long long)r->orders_tried);
	if (r->abort_s_per_gib > 0)
		printf("; abort after %.0f s/GiB", r->abort_s_per_gib);
	printf("\n\n%5s %8s %-16s %12s %12s %12s %-5s %11s  %s\n", "ORDER", "PID", "NAME",
	       "START", "END", "TIME", "BY", "SHARE MiB/s", "CONV");
	for (size_t i = 0; i < r->n; i++)
		print_row(kvmstats_drain__slot(d, i));
	if (cli->verbose > 0) {
		printf("\nbandwidth shares:\n");
		for (size_t i = 0; i < r->n; i++)
			print_shares(kvmstats_drain__slot(d, i));
	}
	bottom_line(d, vms, n);
	if (a->pc.mig.compress > 0 || a->pc.mig.postcopy == 1)
		printf("\nthe shares carry the pages uncompressed and pre-copy only: "
		       "compression and post-copy are not modelled in a drain\n");
	if (a->pc.interval == 0)
		printf("\n--interval 0: no dirty rate measured; the model assumed clean guests\n");
}

void drain_print(struct cli *cli, const struct drain_args *a,
		 const struct kvmstats_drain *d, const struct drain_vm *vms, size_t n)
{
	if (cli->format == OUT_JSON)
		print_json(cli, a, d, vms, n);
	else
		print_text(cli, a, d, vms, n);
}
