// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What a live migration of a VM would cost, and the plan that puts the
 * estimators, the dirty rate and the model together for one VM.
 *
 * The model is QEMU's pre-copy as QEMU 7.2 implements it
 * (migration/ram.c and migration/migration.c), read for facts only:
 *
 *  - ram_save_target_page() tries save_zero_page() first: a page that
 *    buffer_is_zero() finds zero is sent as save_page_header() (a be64 of
 *    offset | RAM_SAVE_FLAG_ZERO) plus one byte: 9 bytes, counted in
 *    ram_counters.duplicate;
 *  - any other page goes through save_normal_page(): the header and
 *    TARGET_PAGE_SIZE bytes, 8 + 4096, counted in ram_counters.normal;
 *  - the first page sent from a RAM block in a pass carries the block's
 *    idstr (one length byte and the name) after its header; later pages of
 *    the same block set RAM_SAVE_FLAG_CONTINUE instead;
 *  - every pass ends with RAM_SAVE_FLAG_EOS, a be64;
 *  - the first pass sends every page of every migratable block (its used
 *    length); each later pass sends the pages whose dirty bit was set
 *    during the previous one (KVM's dirty log, synced between passes);
 *  - migration_iteration_run() completes when the pending dirty memory
 *    (pages x TARGET_PAGE_SIZE) is at most bandwidth x downtime-limit: the
 *    VM is stopped and the rest sent; the transfer is rate-limited to
 *    max-bandwidth (128 MiB/s by default in 7.2), downtime-limit is 300
 *    ms by default;
 *  - without auto-converge (off by default) a guest that dirties memory
 *    as fast as it is sent never completes.
 *
 * So: pass 0 sends zero x 9 + (nonzero + unknown) x 4104 bytes (unknown
 * pages, swapped out, are counted as normal: the worst case) in
 * t0 = bytes / bandwidth; pass k+1 sends the pages dirtied within t_k,
 * read off the measured dirty curve, as normal pages; stop when that is
 * under the downtime threshold, or declare non-convergence when a pass
 * stops shrinking. Dirtied pages are assumed non-zero.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

/* Setup and switch-over of an idle guest, beyond its bytes at the
 * bandwidth: measured 70-90 ms on QEMU 7.2 and 10.0 (256 MiB guests). */
#define KS_MIG_SETUP_S 0.07

/* ---- the model ---- */

double kvmstats_dirty_curve_at(const struct kvmstats_dirty_point *c, uint32_t n,
			       double t, double cap)
{
	double t0 = 0, p0 = 0, v;

	if (!c || !n || t <= 0)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		if (t <= c[i].t) {
			v = c[i].t > t0 ? p0 + (c[i].pages - p0) * (t - t0) / (c[i].t - t0)
					: c[i].pages;
			return v < cap ? v : cap;
		}
		if (i + 1 < n) {
			t0 = c[i].t;
			p0 = c[i].pages;
		}
	}
	/* Past the curve: its last slope (a concave curve's smallest). */
	if (n > 1) {
		t0 = c[n - 2].t;
		p0 = c[n - 2].pages;
	} else {
		t0 = 0;
		p0 = 0;
	}
	v = c[n - 1].pages;
	if (c[n - 1].t > t0)
		v += (c[n - 1].pages - p0) / (c[n - 1].t - t0) * (t - c[n - 1].t);
	if (v < c[n - 1].pages)
		v = c[n - 1].pages;
	return v < cap ? v : cap;
}

/* Bytes of one pass that sends @zero zero pages and @normal other pages
 * from @blocks blocks. */
static double pass_bytes(const struct kvmstats_migrate_input *in, double zero,
			 double normal, double blocks)
{
	double names = in->nblocks ? blocks / in->nblocks * in->block_name_bytes : 0;

	return zero * KVMSTATS_QEMU_ZERO_PAGE_BYTES +
	       normal * KVMSTATS_QEMU_NORMAL_PAGE_BYTES + blocks + names +
	       KVMSTATS_QEMU_EOS_BYTES;
}

/* How one pass is sent, by the mechanism the settings pick. */
struct mech {
	const struct kvmstats_migrate_input *in;
	const struct kvmstats_migrate_settings *s;	/* NULL: 7.2's legacy */
	const struct kvmstats_compress_estimate *c;
	double wire;		/* running total over the wire */
};

static double pass_cost(struct mech *m, double zero, double normal, double blocks)
{
	struct ks_mig_pages pg = { zero, normal, blocks };
	double reported, wire;

	if (!m->s || !m->s->multifd) {
		reported = pass_bytes(m->in, zero, normal, blocks);
		if (m->s && m->s->zero_detect == KVMSTATS_MIG_ZERO_NONE &&
		    m->s->qemu_major >= 9)
			reported = pass_bytes(m->in, 0, zero + normal, blocks);
		m->wire += reported;
		return reported;
	}
	ks_multifd_pass(m->s, m->c, &pg, &reported, &wire);
	m->wire += wire;
	return reported;
}

/* Seconds the channels need to compress @normal pages, at the speed our
 * own sample ran (same library and level), on as many CPUs as channels. */
static double compress_seconds(const struct mech *m, double normal)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double par;

	if (!m->s || !m->s->multifd || !m->c || !m->c->valid || !m->c->pages)
		return 0;
	par = m->s->channels < (unsigned long)(cpus > 0 ? cpus : 1) ?
		      m->s->channels : (double)(cpus > 0 ? cpus : 1);
	return m->c->elapsed_s / (double)m->c->pages * normal / par;
}

int ks_migrate_run(const struct kvmstats_migrate_input *input,
		     const struct kvmstats_migrate_settings *s,
		     const struct kvmstats_compress_estimate *c,
		     struct kvmstats_migrate_prediction *out,
		     struct kvmstats_migrate_detail *d)
{
	struct kvmstats_migrate_input in;
	struct mech m = { &in, s, c, 0 };
	struct ks_throttle th = { .on = s && s->auto_converge };
	double bw, thr, cap, bytes, t, total_b, total_t, pending, rate, lim;
	uint32_t maxp;
	int err = ks_opts_copy(&in, sizeof(in), input);

	if (err || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	bw = in.bandwidth > 0 ? in.bandwidth : (double)KVMSTATS_QEMU_MAX_BANDWIDTH;
	thr = bw * (in.downtime_s > 0 ? in.downtime_s : KVMSTATS_QEMU_DOWNTIME_MS / 1e3);
	/* The rate the transfer runs at: multifd's can exceed the limit. */
	rate = s && s->multifd ? ks_multifd_bandwidth(s) * bw / s->bandwidth : bw;
	maxp = in.max_passes ? in.max_passes : th.on ? 300 : 30;
	cap = (double)(in.zero_pages + in.nonzero_pages + in.unknown_pages);
	out->assumed_clean = !in.curve || !in.npoints;
	if (!out->assumed_clean && in.curve[in.npoints - 1].t > 0)
		out->dirty_pages_per_second = in.curve[in.npoints - 1].pages /
					      in.curve[in.npoints - 1].t;

	bytes = pass_cost(&m, (double)in.zero_pages,
			  (double)(in.nonzero_pages + in.unknown_pages), in.nblocks);
	t = bytes / rate;
	lim = compress_seconds(&m, (double)(in.nonzero_pages + in.unknown_pages));
	if (lim > t)
		t = lim;
	out->first_pass_bytes = (uint64_t)bytes;
	total_b = bytes + (s ? ks_migrate_fixed_bytes(s) : 0);
	total_t = t + (s ? KS_MIG_SETUP_S : 0);
	out->passes = 1;
	for (;;) {
		double next_b, next_t;

		/* The guest's own time runs slower under the throttle. */
		if (th.pct)
			th.throttled_s += t;
		pending = out->assumed_clean ? 0 : kvmstats_dirty_curve_at(
					in.curve, in.npoints, t * (1 - th.pct / 100.0), cap);
		ks_throttle_sync(&th, s, total_t, bytes, pending);
		next_b = pass_cost(&m, 0, pending, pending > 0 ? in.nblocks : 0);
		next_t = next_b / rate;
		if (compress_seconds(&m, pending) > next_t)
			next_t = compress_seconds(&m, pending);
		if (pending * KS_PAGE <= thr) {
			/* Stop and copy: the rest, with the VM paused. */
			out->final_bytes = (uint64_t)next_b;
			out->downtime_s = next_t;
			total_b += next_b;
			total_t += next_t;
			out->passes++;
			out->converges = true;
			break;
		}
		/* While auto-converge can still throttle harder, go on. */
		if ((next_b >= bytes * 0.95 && (!th.on || th.pct >= 99)) ||
		    out->passes >= maxp) {
			snprintf(out->note, sizeof(out->note), "does not converge: "
				 "pass %u would still send %.0f MiB (%.0f pages "
				 "dirtied in %.2f s) > %.0f MiB allowed in the "
				 "downtime", out->passes + 1, next_b / 1048576.0,
				 pending, t, thr / 1048576.0);
			break;
		}
		total_b += next_b;
		total_t += next_t;
		bytes = next_b;
		t = next_t;
		out->passes++;
	}
	out->bytes = (uint64_t)total_b;
	out->seconds = total_t;
	if (d) {
		d->max_throttle = th.max;
		d->throttled_s = th.throttled_s;
		d->effective_bw = rate;
		d->wire_bytes = (uint64_t)(m.wire + (s ? ks_migrate_fixed_bytes(s) : 0));
	}
	if (out->converges)
		snprintf(out->note, sizeof(out->note), "%u passes, %.0f ms downtime%s",
			 out->passes, out->downtime_s * 1e3,
			 out->assumed_clean ? "; assumed a clean guest (no dirty rate)" : "");
	return 0;
}

int kvmstats_migrate__predict(const struct kvmstats_migrate_input *input,
			      struct kvmstats_migrate_prediction *out)
{
	return ks_migrate_run(input, NULL, NULL, out, NULL);
}
