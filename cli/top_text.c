// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top --once: the renderers without a screen. One reading of
 * rates over one interval, as a plain table (kvm_stat -1) or as JSON.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sanitize.h"
#include "top.h"

/* ---- text ------------------------------------------------------------ */

/* A column as wide as its widest cell: a long VM name (or a rate, a
 * source) widens its column instead of shifting the ones after it. */
static int col_width(const struct top_model *m, size_t c)
{
	char cell[160];
	int w = top_cols[c].width;

	for (size_t i = 0; i < m->nvms; i++) {
		col_cell(&top_cols[c], m->vms[i], cell, sizeof(cell));
		if ((int)strlen(cell) > w)
			w = (int)strlen(cell);
	}
	return w;
}

static void print_list(const struct top_model *m)
{
	char cell[160];
	int w[top_ncols];

	for (size_t c = 0; c < top_ncols; c++) {
		if (!col_on(m, c))
			continue;
		w[c] = col_width(m, c);
		printf(top_cols[c].kind == COL_NAME ? "%-*s " : "%*s ",
		       w[c], top_cols[c].title);
	}
	putchar('\n');
	for (size_t i = 0; i < m->nvms; i++) {
		for (size_t c = 0; c < top_ncols; c++) {
			if (!col_on(m, c))
				continue;
			col_cell(&top_cols[c], m->vms[i], cell, sizeof(cell));
			printf(top_cols[c].kind == COL_NAME ? "%-*s " : "%*s ",
			       w[c], cell);
		}
		putchar('\n');
	}
}

static void hist_text(const struct top_series *s,
		      const struct kvmstats_stat *st, char *buf, size_t len)
{
	uint64_t h[kvmstats_stat__size(st)];
	char q[3][32];
	bool have = series_hist(s, st, h);

	fmt_quantile(st, have ? h : NULL, 0.5, q[0], sizeof(q[0]));
	fmt_quantile(st, have ? h : NULL, 0.9, q[1], sizeof(q[1]));
	fmt_quantile(st, have ? h : NULL, 0.99, q[2], sizeof(q[2]));
	snprintf(buf, len, "p50 %s  p90 %s  p99 %s", q[0], q[1], q[2]);
}

/* One stat: total (or level), rate over the interval, share, extra. */
static void print_stat(const struct top_series *s,
		       const struct kvmstats_stat *st, unsigned int nvals)
{
	char total[48] = "", rate[48] = "", share[16] = "", extra[128] = "";
	unsigned int type = kvmstats_stat__type(st);
	double sh;

	if (!series_known(s, st)) {
		/* Refused or not kept by the source: not a 0. */
		printf("  %-30s %12s %12s %6s  %s\n",
		       safe_str(kvmstats_stat__name(st)), "n/a", "n/a", "",
		       "(unknown)");
		return;
	}
	if (stat_is_hist(st)) {
		uint64_t h[kvmstats_stat__size(st)];
		double dt = series_interval_s(s);

		fmt_count(series_total(s, st), total, sizeof(total));
		if (series_hist(s, st, h) && !isnan(dt))
			fmt_count((double)kvmstats_hist__count(st, h) / dt,
				  rate, sizeof(rate));
		else
			snprintf(rate, sizeof(rate), "-");
		hist_text(s, st, extra, sizeof(extra));
	} else if (type == KVMSTATS_TYPE_CUMULATIVE) {
		fmt_level(st, series_total(s, st), 1, total, sizeof(total));
		fmt_rate(st, series_rate(s, st), rate, sizeof(rate));
		sh = series_share(s, st);
		if (!isnan(sh))
			snprintf(share, sizeof(share), "%.1f", sh);
	} else {
		fmt_level(st, series_total(s, st), nvals, total, sizeof(total));
		snprintf(extra, sizeof(extra), "%s",
			 type == KVMSTATS_TYPE_PEAK ? "(peak)" : "(level)");
	}
	printf("  %-30s %12s %12s %6s  %s\n", safe_str(kvmstats_stat__name(st)), total,
	       rate, share, extra);
}

static void print_series(const struct top_opts *o, const struct top_series *s,
			 unsigned int nvals)
{
	const struct kvmstats_stat *st;

	if (!s->schema)
		return;
	kvmstats_schema__for_each (st, s->schema)
		if (stat_shown(o, NULL, s, st))
			print_stat(s, st, nvals);
}

int top_print_text(const struct top_opts *o, const struct top_model *m)
{
	char label[160];
	double dt = m->frames > 1 ? (double)(m->t_cur - m->t_prev) / 1e9 : NAN;

	printf("%zu VM%s, ", m->nvms, m->nvms == 1 ? "" : "s");
	/* One reading (a log shorter than the interval): no interval. */
	if (isnan(dt))
		printf("no rates (one reading)");
	else
		printf("rates over %.2f s", dt);
	printf("%s\n\n",
	       o->include_past ? ", totals since each VM started" : "");
	print_list(m);
	for (size_t i = 0; i < m->nvms; i++) {
		const struct top_vm *vm = m->vms[i];

		printf("\nVM %s  pid %d  id %s  source %s  vcpus %zu\n",
		       vm_label(vm, label, sizeof(label)), (int)vm->pid, safe_str(vm->id),
		       vm->source, vm->nvcpus);
		if (vm_unknown(vm))
			printf("  no counter readable: %s\n", vm_unknown(vm));
		printf("  %-30s %12s %12s %6s\n", "stat", "total", "rate/s",
		       "%total");
		print_series(o, &vm->stats, 1);
		print_series(o, &vm->sum, (unsigned int)vm->nsum);
	}
	if (!m->nvms)
		printf("no VM found: %s\n", demo_hint());
	return EXIT_OK;
}

/* ---- JSON ------------------------------------------------------------ */

static struct json_object *num_or_null(double v)
{
	return isnan(v) ? NULL : cli_json_double(v);
}

static struct json_object *hist_json(const struct top_series *s,
				     const struct kvmstats_stat *st)
{
	struct json_object *o = json_object_new_object();
	uint64_t h[kvmstats_stat__size(st)];
	bool have = series_hist(s, st, h);
	double dt = series_interval_s(s);
	static const struct {
		const char *key;
		double q;
	} qs[] = {{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}};

	json_object_object_add(o, "total",
			       cli_json_double(series_total(s, st)));
	json_object_object_add(
		o, "count",
		have ? json_object_new_uint64(kvmstats_hist__count(st, h))
		     : NULL);
	json_object_object_add(
		o, "rate",
		have && !isnan(dt)
			? cli_json_double(
				  (double)kvmstats_hist__count(st, h) / dt)
			: NULL);
	/* Quantiles in the stat's base unit (seconds, bytes...). */
	for (size_t i = 0; i < 3; i++) {
		double x = have ? kvmstats_hist__quantile(st, h, qs[i].q) : NAN;

		json_object_object_add(
			o, qs[i].key,
			num_or_null(isnan(x) ? x
					     : kvmstats_stat__scale(st, x)));
	}
	return o;
}

static struct json_object *stat_obj(const struct top_series *s,
				    const struct kvmstats_stat *st)
{
	struct json_object *o;
	unsigned int type = kvmstats_stat__type(st);
	unsigned int unit = kvmstats_stat__unit(st);

	if (!series_known(s, st)) {
		/* Unknown: null values, never 0. */
		o = json_object_new_object();
		json_object_object_add(o, "type", json_object_new_string(
				kvmstats_type_str(type)));
		json_object_object_add(o, "value", NULL);
		if (type == KVMSTATS_TYPE_CUMULATIVE) {
			json_object_object_add(o, "total", NULL);
			json_object_object_add(o, "rate", NULL);
		}
		return o;
	}
	if (stat_is_hist(st))
		o = hist_json(s, st);
	else
		o = json_object_new_object();
	json_object_object_add(o, "type",
			       json_object_new_string(kvmstats_type_str(type)));
	if (unit != KVMSTATS_UNIT_NONE)
		json_object_object_add(
			o, "unit",
			json_object_new_string(kvmstats_unit_str(unit)));
	if (stat_is_hist(st))
		return o;
	json_object_object_add(
		o, "value", stat_json(st, kvmstats_stat__values(st, s->cur)));
	if (type == KVMSTATS_TYPE_CUMULATIVE) {
		json_object_object_add(
			o, "total",
			cli_json_double(series_total(s, st)));
		json_object_object_add(o, "rate",
				       num_or_null(series_rate(s, st)));
	}
	return o;
}

static struct json_object *series_json(const struct top_opts *o,
				       const struct top_series *s)
{
	struct json_object *obj = json_object_new_object();
	const struct kvmstats_stat *st;

	if (!s->schema)
		return obj;
	kvmstats_schema__for_each (st, s->schema)
		if (stat_shown(o, NULL, s, st))
			json_object_object_add(obj, kvmstats_stat__name(st),
					       stat_obj(s, st));
	return obj;
}

/* The window the rates span, as wall-clock times (seconds since the
 * epoch) of its two readings: each reading's own time, which for a QMP
 * or libvirt source is its poll's, not the sweep's. */
static void add_window(struct json_object *j, const struct top_series *s)
{
	struct timespec rt, mono;
	double off;

	if (s->n < 2)
		return;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	off = (double)rt.tv_sec - (double)mono.tv_sec +
	      (double)(rt.tv_nsec - mono.tv_nsec) / 1e9;
	json_object_object_add(j, "from",
			       cli_json_double((double)s->t_prev / 1e9 + off));
	json_object_object_add(j, "to",
			       cli_json_double((double)s->t_cur / 1e9 + off));
}

static struct json_object *vm_json(const struct top_opts *o,
				   const struct top_vm *vm)
{
	struct json_object *j = json_object_new_object();
	struct json_object *vcpus = json_object_new_array();
	double dt = series_interval_s(vm->sum.schema ? &vm->sum : &vm->stats);

	json_object_object_add(j, "pid", json_object_new_int(vm->pid));
	json_object_object_add(j, "name", json_object_new_string(vm->name));
	json_object_object_add(j, "vm", json_object_new_int(vm->vm));
	json_object_object_add(j, "id", json_object_new_string(vm->id));
	json_object_object_add(j, "source", json_object_new_string(vm->source));
	json_object_object_add(j, "unknown", vm_unknown(vm) ? json_object_new_string(
				       vm_unknown(vm)) : NULL);
	json_object_object_add(j, "interval", num_or_null(dt));
	add_window(j, vm->sum.schema ? &vm->sum : &vm->stats);
	json_object_object_add(j, "stats", series_json(o, &vm->stats));
	json_object_object_add(j, "vcpu_sum", series_json(o, &vm->sum));
	for (size_t i = 0; i < vm->nvcpus; i++) {
		struct json_object *c = json_object_new_object();

		json_object_object_add(c, "index",
				       json_object_new_int(vm->vcpus[i].index));
		json_object_object_add(c, "stats",
				       series_json(o, &vm->vcpus[i]));
		json_object_array_add(vcpus, c);
	}
	json_object_object_add(j, "vcpus", vcpus);
	return j;
}

int top_print_json(struct cli *cli, const struct top_opts *o,
		   const struct top_model *m)
{
	struct json_object *root = json_object_new_object();
	struct json_object *vms = json_object_new_array();
	double dt = m->frames > 1 ? (double)(m->t_cur - m->t_prev) / 1e9 : NAN;

	json_object_object_add(root, "interval", num_or_null(dt));
	json_object_object_add(root, "include_past",
			       json_object_new_boolean(o->include_past));
	for (size_t i = 0; i < m->nvms; i++)
		json_object_array_add(vms, vm_json(o, m->vms[i]));
	json_object_object_add(root, "vms", vms);
	cli_print_json(cli, root);
	json_object_put(root);
	return EXIT_OK;
}
