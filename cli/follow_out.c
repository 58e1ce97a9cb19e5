// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats follow's output: one line per event, text or a JSON object.
 * Every figure is QEMU's or the plan's as read; one that was not given is
 * "-" in text and null in JSON, never 0.
 */
#include <math.h>
#include <stdio.h>

#include "follow.h"
#include "sanitize.h"

#define jset json_object_object_add

double follow_error(double real, double pred)
{
	if (isnan(real) || isnan(pred) || real <= 0)
		return NAN;
	return (real - pred) / real;
}

static struct json_object *jnum(double v)
{
	return isnan(v) ? NULL : cli_json_double(v);
}

/* A field of QEMU's answer, or null. */
static struct json_object *jfield(const struct kvmstats_migration *m,
				  unsigned int bit, uint64_t v)
{
	return m->have & bit ? json_object_new_uint64(v) : NULL;
}

static struct json_object *jsecs(const struct kvmstats_migration *m,
				 unsigned int bit, uint64_t ms)
{
	return m->have & bit ? cli_json_double((double)ms / 1e3) : NULL;
}

static double real_s(const struct kvmstats_migration *m)
{
	return m->have & KVMSTATS_MIGF_TOTAL_TIME
		       ? (double)m->total_time_ms / 1e3
		       : NAN;
}

static double real_bytes(const struct kvmstats_migration *m)
{
	return m->have & KVMSTATS_MIGF_TRANSFERRED ? (double)m->transferred
						   : NAN;
}

static struct json_object *event(const struct fvm *v, const char *what,
				 double t)
{
	struct json_object *o = json_object_new_object();

	jset(o, "event", json_object_new_string(what));
	jset(o, "pid", json_object_new_int((int)v->pid));
	jset(o, "name", json_object_new_string(v->name));
	jset(o, "time_s", cli_json_double(t));
	/* Whose counters: QEMU's over QMP, or libvirt's job info. */
	jset(o, "source",
	     v->f ? json_object_new_string(kvmstats_follow__source(v->f))
		  : NULL);
	return o;
}

static void add_pred(struct json_object *o, const struct fvm *v)
{
	jset(o, "predicted_seconds", jnum(v->pred_s));
	jset(o, "predicted_transfer_bytes", jnum(v->pred_bytes));
	jset(o, "predicted_passes",
	     v->pred_passes >= 0 ? json_object_new_int(v->pred_passes) : NULL);
	jset(o, "predicted_dirty_pages_per_second", jnum(v->pred_dirty));
	if (!isnan(v->sched_start) || !isnan(v->sched_end)) {
		jset(o, "scheduled_start_s", jnum(v->sched_start));
		jset(o, "scheduled_end_s", jnum(v->sched_end));
	}
}

/* What QEMU counted, as of its latest answer. */
static void add_real(struct json_object *o, const struct kvmstats_migration *m)
{
	jset(o, "status", json_object_new_string(m->status_name));
	jset(o, "seconds",
	     jsecs(m, KVMSTATS_MIGF_TOTAL_TIME, m->total_time_ms));
	jset(o, "job_seconds",
	     jsecs(m, KVMSTATS_MIGF_JOB_TIME, m->job_time_ms));
	jset(o, "transferred_bytes",
	     jfield(m, KVMSTATS_MIGF_TRANSFERRED, m->transferred));
	jset(o, "remaining_bytes",
	     jfield(m, KVMSTATS_MIGF_REMAINING, m->remaining));
	jset(o, "total_bytes", jfield(m, KVMSTATS_MIGF_TOTAL, m->total));
	jset(o, "passes",
	     jfield(m, KVMSTATS_MIGF_SYNC_COUNT, m->dirty_sync_count));
	jset(o, "dirty_pages_rate",
	     jfield(m, KVMSTATS_MIGF_DIRTY_RATE, m->dirty_pages_rate));
	jset(o, "mbps",
	     m->have & KVMSTATS_MIGF_MBPS ? cli_json_double(m->mbps)
					  : NULL);
	jset(o, "throttle_percent",
	     jfield(m, KVMSTATS_MIGF_THROTTLE, m->throttle_percent));
}

static void emit(const struct cli *cli, struct json_object *o)
{
	cli_print_json(cli, o);
	json_object_put(o);
	fflush(stdout);
}

static void human_bytes(double b, char *buf, size_t len)
{
	if (isnan(b))
		snprintf(buf, len, "-");
	else if (b >= 1 << 30)
		snprintf(buf, len, "%.2f GiB", b / (1 << 30));
	else
		snprintf(buf, len, "%.1f MiB", b / (1 << 20));
}

static void human_num(double v, const char *fmt, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, fmt, v);
}

static void human_err(double e, char *buf, size_t len)
{
	if (isnan(e))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%+.1f%%", e * 100);
}

static double field(const struct kvmstats_migration *m, unsigned int bit,
		    uint64_t v)
{
	return m->have & bit ? (double)v : NAN;
}

void follow_out_start(const struct cli *cli, const struct fvm *v, double t)
{
	struct json_object *o;
	char s[32], b[32];

	if (cli->format == OUT_JSON) {
		o = event(v, "start", t);
		jset(o, "status", json_object_new_string(v->m.status_name));
		add_pred(o, v);
		emit(cli, o);
		return;
	}
	human_num(v->pred_s, "%.2f s", s, sizeof(s));
	human_bytes(v->pred_bytes, b, sizeof(b));
	printf("%7.1f  pid %d %s: migration started (%s, read from %s); "
	       "predicted %s, %s\n",
	       t, (int)v->pid, safe_str(v->name), safe_str(v->m.status_name),
	       kvmstats_follow__source(v->f), s, b);
	fflush(stdout);
}

void follow_out_progress(const struct cli *cli, const struct fvm *v, double t)
{
	const struct kvmstats_migration *m = &v->m;
	char rs[32], ps[32], rb[32], pb[32], pa[16], pp[16], rd[32], pd[32];
	struct json_object *o;

	if (cli->format == OUT_JSON) {
		o = event(v, "progress", t);
		add_real(o, m);
		jset(o, "expected_downtime_s",
		     jsecs(m, KVMSTATS_MIGF_EXPECTED_DOWNTIME,
			   m->expected_downtime_ms));
		add_pred(o, v);
		emit(cli, o);
		return;
	}
	human_num(real_s(m), "%.1f s", rs, sizeof(rs));
	human_num(v->pred_s, "%.1f s", ps, sizeof(ps));
	human_bytes(real_bytes(m), rb, sizeof(rb));
	human_bytes(v->pred_bytes, pb, sizeof(pb));
	human_num(field(m, KVMSTATS_MIGF_SYNC_COUNT, m->dirty_sync_count),
		  "%.0f", pa, sizeof(pa));
	human_num(v->pred_passes >= 0 ? v->pred_passes : NAN, "%.0f", pp,
		  sizeof(pp));
	human_num(field(m, KVMSTATS_MIGF_DIRTY_RATE, m->dirty_pages_rate),
		  "%.0f", rd, sizeof(rd));
	human_num(v->pred_dirty, "%.0f", pd, sizeof(pd));
	printf("%7.1f  pid %d %s: %s  time %s (pred %s)  sent %s (pred %s)  "
	       "passes %s (pred %s)  dirty %s pages/s (pred %s)\n",
	       t, (int)v->pid, safe_str(v->name), safe_str(m->status_name), rs,
	       ps, rb, pb, pa, pp, rd, pd);
	fflush(stdout);
}

void follow_out_end(const struct cli *cli, const struct fvm *v, double t,
		    const char *outcome)
{
	const struct kvmstats_migration *m = &v->m;
	double te = follow_error(real_s(m), v->pred_s);
	double be = follow_error(real_bytes(m), v->pred_bytes);
	char rs[32], ps[32], rb[32], pb[32], es[16], eb[16], pa[16], pp[16];
	struct json_object *o;

	if (cli->format == OUT_JSON) {
		o = event(v, "end", t);
		add_real(o, m);
		jset(o, "outcome", json_object_new_string(outcome));
		jset(o, "downtime_s",
		     jsecs(m, KVMSTATS_MIGF_DOWNTIME, m->downtime_ms));
		jset(o, "setup_s",
		     jsecs(m, KVMSTATS_MIGF_SETUP_TIME, m->setup_time_ms));
		jset(o, "duplicate_pages",
		     jfield(m, KVMSTATS_MIGF_DUPLICATE, m->duplicate));
		jset(o, "normal_pages",
		     jfield(m, KVMSTATS_MIGF_NORMAL, m->normal));
		jset(o, "precopy_bytes",
		     jfield(m, KVMSTATS_MIGF_PRECOPY_BYTES, m->precopy_bytes));
		jset(o, "postcopy_bytes",
		     jfield(m, KVMSTATS_MIGF_POSTCOPY_BYTES,
			    m->postcopy_bytes));
		jset(o, "started_s", jnum(v->seen_s));
		jset(o, "error",
		     m->error[0] ? json_object_new_string(m->error) : NULL);
		add_pred(o, v);
		jset(o, "time_error", jnum(te));
		jset(o, "bytes_error", jnum(be));
		emit(cli, o);
		return;
	}
	human_num(real_s(m), "%.2f s", rs, sizeof(rs));
	human_num(v->pred_s, "%.2f s", ps, sizeof(ps));
	human_bytes(real_bytes(m), rb, sizeof(rb));
	human_bytes(v->pred_bytes, pb, sizeof(pb));
	human_err(te, es, sizeof(es));
	human_err(be, eb, sizeof(eb));
	human_num(field(m, KVMSTATS_MIGF_SYNC_COUNT, m->dirty_sync_count),
		  "%.0f", pa, sizeof(pa));
	human_num(v->pred_passes >= 0 ? v->pred_passes : NAN, "%.0f", pp,
		  sizeof(pp));
	printf("%7.1f  pid %d %s: %s: took %s (predicted %s, error %s), sent "
	       "%s "
	       "(predicted %s, error %s), %s passes (predicted %s)%s%s\n",
	       t, (int)v->pid, safe_str(v->name), safe_str(outcome), rs, ps, es,
	       rb, pb, eb, pa, pp, m->error[0] ? ": " : "", safe_str(m->error));
	fflush(stdout);
}

void follow_out_unreadable(const struct cli *cli, const struct fvm *v, double t,
			   const char *why)
{
	struct json_object *o;

	if (cli->format != OUT_JSON) {
		cli_warn(cli, "pid %d %s: %s", (int)v->pid, safe_str(v->name),
			 safe_str(why));
		return;
	}
	o = event(v, "unreadable", t);
	jset(o, "reason", json_object_new_string(why));
	emit(cli, o);
}
