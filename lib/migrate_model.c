// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What a live migration of a VM would cost: the pre-copy passes. The
 * mechanisms that change a pass are apart (migrate_multifd.c,
 * migrate_compress.c, migrate_throttle.c for auto-converge), as are the
 * switch to post-copy (migrate_postcopy.c), the runs at the inputs'
 * bounds and the verdict (migrate_verdict.c), and the plan that gathers
 * the inputs (migrate_plan.c).
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
 *    length); later pages are those whose dirty bit was set by a sync of
 *    the bitmap with KVM's dirty log;
 *  - the bitmap is synced only when the pending estimate (the bits still
 *    set, x TARGET_PAGE_SIZE) falls under the threshold: 7.2's
 *    ram_save_pending() syncs only then, 8.0+'s migration_iteration_run()
 *    calls the exact (syncing) estimate only then. The pages still set at
 *    that moment stay pending: the sync adds the pages dirtied since the
 *    previous sync to them;
 *  - the estimate is read once per iteration, and an iteration sends
 *    until the rate limit's budget for its BUFFER_DELAY window (100 ms)
 *    is spent: the pages left when it falls under the threshold are
 *    between threshold - one window's pages and the threshold;
 *  - migration_iteration_run() completes when the pending memory after a
 *    sync is under the threshold: threshold_size, the bandwidth QEMU
 *    measured over the last window (what ran, multifd's included) x
 *    downtime-limit. The VM is stopped and the rest sent; the transfer is
 *    rate-limited to max-bandwidth (128 MiB/s by default in 7.2),
 *    downtime-limit is 300 ms by default;
 *  - without auto-converge (off by default) a guest that dirties memory
 *    as fast as it is sent never completes.
 *
 * So: pass 0 sends zero x 9 + (nonzero + unknown) x 4104 bytes (unknown
 * pages, swapped out, are counted as normal: the worst case), all but
 * the leftover L (the last pages of the pass that the window crossing
 * the threshold did not reach: migrate_tail.c) before the first sync;
 * each sync adds the pages dirtied
 * since the previous one (read off the measured dirty curve, as normal
 * pages) to what was left; QEMU stops when that sum is under the
 * threshold, so a converging guest must dirty less than about half a
 * window's pages between two syncs, not merely less than the threshold.
 * Non-convergence: the rounds between syncs stop shrinking (with
 * auto-converge: and the throttle is at its most). Dirtied pages are
 * assumed non-zero. A sync sets bits in a bitmap: a leftover page the
 * guest dirtied again is pending once, and QEMU counts only the bits it
 * newly set (num_dirty_pages_period, what auto-converge weighs). Which
 * pages the guest rewrites is not known, only how many distinct ones
 * within t (the curve) and, where the curve levels off, its working set:
 * the estimate takes them uniform over it, so the share of them that
 * falls on the leftover is the leftover's share of the working set; the
 * high bound (migrate_verdict.c) takes them apart from the leftover as
 * far as the working set allows (a guest rewriting all of it leaves
 * pending no more than all of it). Measured against QEMU (docs/plan.md):
 * a guest writing pages at random matches the estimate; one sweeping
 * its pages in order falls between the two. With postcopy-ram,
 * when the first sync leaves more than the threshold, the migration
 * switches to post-copy there instead.
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

/* Syncs after which a migration that still shrinks is called
 * non-converging (it would take hours). */
#define KS_MIG_MAX_SYNCS 1000

/* Windows drawn one by one before a sync where they vary; those before
 * are taken at their mean. */
#define KS_MIG_DRAWN 16

/* Seeds the draws of a run's path (ks_migrate_run's flags). */
#define KS_MIG_SEED 0x9e3779b97f4a7c15ull

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

/* QEMU 8.x+ counts the bytes of legacy pre-copy against max-bandwidth
 * when its QEMUFile flushes them (qemu-file.c), 7.2 when it queued them:
 * the window's budget is checked in steps of one flush, 64 iovecs of 32
 * normal pages (a header and a page each), and the step that crosses it
 * is sent whole. Measured on QEMU 10.0 (a quiet guest, loopback TCP):
 * 1.26x the limit at 2 and 4 MiB/s (this gives 1.25x), 1.15x at 8
 * (1.10x), 1.04x at 16 (1.02x); 7.2 ran at 1.005x at 4 MiB/s. */
#define KS_MIG_FLUSH_BYTES (32.0 * KVMSTATS_QEMU_NORMAL_PAGE_BYTES)

static double legacy_rate(const struct kvmstats_migrate_settings *s, double bw)
{
	double budget = bw * KS_MIG_WINDOW_S;

	if (!s || s->qemu_major < 8)
		return bw;
	return (floor(budget / KS_MIG_FLUSH_BYTES) + 1) * KS_MIG_FLUSH_BYTES /
	       KS_MIG_WINDOW_S;
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

static double pass_cost(const struct mech *m, double zero, double normal,
			double blocks, double *wire)
{
	struct ks_mig_pages pg = { zero, normal, blocks };
	double reported;

	if (!m->s || !m->s->multifd) {
		reported = pass_bytes(m->in, zero, normal, blocks);
		if (m->s && m->s->zero_detect == KVMSTATS_MIG_ZERO_NONE &&
		    m->s->qemu_major >= 9)
			reported = pass_bytes(m->in, 0, zero + normal, blocks);
		*wire = reported;
		return reported;
	}
	ks_multifd_pass(m->s, m->c, &pg, &reported, wire);
	return reported;
}

/* The CPUs the source's migration threads may run on. */
static long source_cpus(const struct kvmstats_migrate_input *in)
{
	long cpus = in->cpus ? (long)in->cpus : sysconf(_SC_NPROCESSORS_ONLN);

	return cpus < 1 ? 1 : cpus;
}

/* @threads, as many as there are CPUs to run them. */
static double on_cpus(const struct kvmstats_migrate_input *in,
		      unsigned int threads)
{
	long cpus = source_cpus(in);

	return threads < (unsigned long)cpus ? (double)threads : (double)cpus;
}

/* CPU seconds one thread needs to compress @normal pages, at the speed
 * our own sample's compressor ran (same library and level). Not the
 * sample's elapsed time: reading the pages from the VMM took most of it
 * where they compress well (twice QEMU's time, zstd in the lab). */
static double compress_cpu(const struct mech *m, double normal)
{
	double per_page;

	if (!m->s || !m->s->multifd || !m->c || !m->c->valid || !m->c->pages)
		return 0;
	per_page = (m->c->cpu_s > 0 ? m->c->cpu_s : m->c->elapsed_s) /
		   (double)m->c->pages;
	return per_page * normal;
}

/* QEMU reads and tests every page it sends for zero (buffer_is_zero())
 * before it sends it: a pass cannot be faster than that walk, which a
 * mostly-zero guest on a fast link is limited by (a 1 TiB guest at ~10
 * GB/s takes 100 s). The rate is our own scan's on this host, which
 * reads and tests the same pages the same way; the testers are the
 * migration thread, or the multifd channels where they test (9.0+).
 * Seconds per page walked; 0: not modelled. */
static double walk_per_page(const struct kvmstats_migrate_input *in,
			    const struct kvmstats_migrate_settings *s)
{
	unsigned int testers = s ? ks_multifd_zero_testers(s) : 1;

	if (in->walk_rate <= 0 || !testers)
		return 0;
	return KS_PAGE / (in->walk_rate * on_cpus(in, testers));
}

/* Multifd's packets in flight over a window's budget, @lo to @hi, for
 * the CPUs the source's threads have and those its vCPUs kept busy. */
static void inflight(const struct kvmstats_migrate_input *in,
		     const struct kvmstats_migrate_settings *s, unsigned int *lo,
		     unsigned int *hi)
{
	ks_multifd_inflight_range(s, (double)source_cpus(in), in->vmm_busy, lo,
				  hi);
}

bool ks_migrate_windows_vary(const struct kvmstats_migrate_input *in,
			     const struct kvmstats_migrate_settings *s)
{
	unsigned int lo, hi;

	if (!s || !s->multifd)
		return false;
	inflight(in, s, &lo, &hi);
	return hi > lo;
}

/* The model's state over the passes. */
struct run {
	struct kvmstats_migrate_input in;
	const struct kvmstats_migrate_settings *s;
	struct mech m;
	struct ks_throttle th;
	double bw, thr, cap, rate;
	double downtime;	/* downtime-limit, s */
	unsigned int k_lo, k_hi;	/* multifd packets a window sends over
					 * its budget, drawn from k_lo to k_hi */
	double thr_max;		/* the threshold after the fullest window */
	double win_thr;		/* the threshold after the last window sent */
	uint64_t rng;		/* draws each window's packets in flight */
	double walk;		/* seconds per page QEMU tests, 0: not modelled */
	double bytes, t;	/* sent since the last sync, and in what time */
	double left, left_b, left_w;	/* pages (bytes reported, on the wire)
					 * not sent at it */
	double ws;		/* pages the guest writes to */
	bool left_dirtied;	/* the leftover is of dirtied pages (not pass 0's) */
	bool apart;		/* the guest's writes apart from the leftover
				 * (else uniform over ws) */
	double total_b, total_t;
	double low;		/* the least pending after a sync so far */
	unsigned int stalled;	/* syncs since it was last lower */
};

/* Pages dirtied within a pass of @t seconds (the guest's own time runs
 * slower under the throttle). */
static double dirtied(const struct run *r, double t)
{
	if (!r->in.curve || !r->in.npoints)
		return 0;
	return ks_mig_dirtied_at(r->in.curve, r->in.npoints,
				 t * (1 - r->th.pct / 100.0), r->ws, r->cap);
}

/* The curve at @t. Before its first point, a guest with a working set
 * @ws follows a uniform writer's W(1 - exp(-kt)) through that point, not
 * the straight line from 0: that line misses what the curve bent away by
 * then (a sixth, for a guest rewriting its set twice a second sampled
 * at 0.25 s), and the short rounds before a stop-and-copy read it. */
double ks_mig_dirtied_at(const struct kvmstats_dirty_point *c, uint32_t n,
			 double t, double ws, double cap)
{
	double k;

	if (!c || !n || t <= 0 || t >= c[0].t || !(ws < cap) ||
	    !(c[0].pages > 0) || c[0].pages >= ws)
		return kvmstats_dirty_curve_at(c, n, t, cap);
	k = -log1p(-c[0].pages / ws) / c[0].t;
	return fmin(cap, -ws * expm1(-k * t));
}

/* The pages the guest writes to: where its curve levels off (its last
 * slope under 0.9 x its first), its level there, corrected for the slope
 * left (a uniform writer's curve, W(1 - exp(-rt/W)), has
 * W = D(t) / (1 - D'(t) / r)); a curve still rising as it began shows no
 * bound: all of RAM's @cap. */
double ks_mig_working_set(const struct kvmstats_dirty_point *c, uint32_t n,
			  double cap)
{
	double first, last, dt;

	if (!c || n < 3 || c[0].t <= 0 || c[0].pages <= 0)
		return cap;
	dt = c[n - 1].t - c[n - 2].t;
	first = c[0].pages / c[0].t;
	last = dt > 0 ? fmax(0, c[n - 1].pages - c[n - 2].pages) / dt : first;
	if (last >= 0.9 * first)
		return cap;
	return fmin(cap, c[n - 1].pages / (1 - last / first));
}

/* Of @d pages dirtied since the last sync, those whose bit was not set
 * (pending already): the leftover's pages in the working set (all of
 * them once it is of dirtied pages, else their share of RAM's @cap)
 * are rewritten as uniform writes would, or, @apart (the high bound),
 * only as far as they must be. */
double ks_mig_newly_dirty(double d, double left, double ws, double cap,
			  bool left_dirtied, bool apart)
{
	double in_ws = left_dirtied ? left : cap > 0 ? left * ws / cap : 0, over;

	if (ws <= 0)
		return d;
	in_ws = fmin(in_ws, ws);
	over = apart ? fmax(0, in_ws + d - ws) : d * in_ws / ws;
	return d - fmin(over, d);
}

/* The seconds a pass of @pages pages, @normal of them not zero, takes on
 * the source's CPUs: the zero test of every page and the compression of
 * the others. Where the channels test (9.0+ multifd), a channel tests its
 * pages, then compresses them: the two add up, on the same threads.
 * Otherwise the migration thread tests while the channels compress: each
 * bounds the pass, and together they share the CPUs. */
static double cpu_seconds(const struct run *r, double pages, double normal)
{
	double walk = pages * r->walk, comp = compress_cpu(&r->m, normal);
	unsigned int ch = r->s && r->s->multifd ? r->s->channels : 0;

	if (!ch)
		return walk;
	if (ks_multifd_tests_zero(r->s))
		return walk + comp / on_cpus(&r->in, ch);
	return fmax(fmax(walk, comp / on_cpus(&r->in, ch)),
		    (walk + comp) / on_cpus(&r->in, ch + 1));
}

/* Seconds to send @b bytes of @pages pages, @normal of them not zero:
 * at the rate, unless testing and compressing them takes longer. */
static double pass_seconds(const struct run *r, double b, double pages,
			   double normal)
{
	return fmax(b / r->rate, cpu_seconds(r, pages, normal));
}

/* What QEMU sends without a rate limit (the stop-and-copy, post-copy
 * without max-postcopy-bandwidth) runs at the link's speed, where it is
 * known; else at @limit, an upper bound on its time. */
static double unlimited_rate(const struct run *r, double limit)
{
	return r->in.link_bw > 0 ? r->in.link_bw : limit;
}

/* The stop-and-copy of @b bytes, @pages pages: ram_save_complete()
 * flushes them regardless of max-bandwidth. */
static double final_seconds(const struct run *r, double b, double pages)
{
	return fmax(b / unlimited_rate(r, r->rate),
		    cpu_seconds(r, pages, pages));
}

/* postcopy-ram: the switch after the first pass, when pre-copy would not
 * stop right after it. */
static void switch_to_postcopy(struct run *r, double pending,
			       struct kvmstats_migrate_prediction *out)
{
	struct ks_postcopy pc;

	ks_postcopy_switch(r->s, unlimited_rate(r, r->bw), pending, &pc);
	out->postcopy = true;
	out->converges = true;
	out->passes = 1;
	out->downtime_s = pc.downtime_s;
	out->final_bytes = (uint64_t)pc.switch_bytes;
	/* What pass 0 had left at the first sync goes in post-copy too. */
	pc.bytes += r->left_b;
	pc.seconds = pc.bytes / pc.bw;
	out->postcopy_s = pc.seconds;
	out->postcopy_bytes = (uint64_t)pc.bytes;
	out->postcopy_bw = pc.bw;
	r->m.wire += pc.bytes;
	r->total_b += pc.bytes;
	r->total_t += pc.downtime_s + pc.seconds;
	snprintf(out->note, sizeof(out->note), "post-copy at the first sync: "
		 "%.0f ms downtime, then %.2f s of post-copy (%.0f MiB the guest "
		 "faults in)%s", pc.downtime_s * 1e3, pc.seconds,
		 pc.bytes / 1048576.0,
		 r->s->postcopy_bw > 0 ? ""
		 : r->in.link_bw > 0
			 ? "; max-postcopy-bandwidth unlimited: at the link's speed"
			 : "; max-postcopy-bandwidth unlimited: taken as max-bandwidth");
}

/* QEMU's threshold after a window that sent @w bytes: the bandwidth it
 * measured over the window, or avail-switchover-bandwidth where set
 * (8.2+), times downtime-limit. */
static double threshold(const struct run *r, double w)
{
	if (r->s && r->s->switchover_bw > 0)
		return r->s->switchover_bw * r->downtime;
	return w / KS_MIG_WINDOW_S * r->downtime;
}

/* Bytes of a window with @k multifd packets in flight over its budget;
 * without multifd windows do not vary: the rate's. */
static double window_bytes_at(const struct run *r, unsigned int k)
{
	if (!r->s || !r->s->multifd)
		return r->rate * KS_MIG_WINDOW_S;
	return ks_multifd_window(r->s, r->bw, k);
}

/* The next window: its bytes, and the threshold QEMU takes from it. Its
 * multifd packets in flight are drawn (xorshift64*, seeded per path, so
 * a run is reproducible). */
static double next_window(struct run *r)
{
	unsigned int k = r->k_lo;
	double w;

	if (r->k_hi > r->k_lo) {
		r->rng ^= r->rng >> 12;
		r->rng ^= r->rng << 25;
		r->rng ^= r->rng >> 27;
		k += (unsigned int)((r->rng * 2685821657736338717ull) >> 33) %
		     (r->k_hi - r->k_lo + 1);
	}
	w = window_bytes_at(r, k);
	r->win_thr = threshold(r, w);
	return w;
}

/* Windows that do not vary, of @win pages each, after a sync that left
 * @pages pending over the threshold @thr: the pages left after the
 * first window that takes the estimate under @thr. */
double ks_mig_round_leftover(double pages, double thr, double win)
{
	double windows;

	if (win <= 0)
		return 0;
	windows = pages > thr ? floor((pages - thr) / win) + 1 : 1;
	return fmax(0, pages - windows * win);
}

/* Whether @pend, the pending memory after a sync, is a new @low (by
 * 0.1%); else one more sync counts in @stalled. */
bool ks_mig_new_low(double *low, unsigned int *stalled, double pend)
{
	if (pend < *low * 0.999) {
		*low = pend;
		*stalled = 0;
		return true;
	}
	++*stalled;
	return false;
}

/* After a sync that left @pages pending (@per bytes each) over the
 * threshold: the migration thread reads the estimate after each window
 * and syncs after the first that leaves it under that window's own
 * threshold. Traced on QEMU 10.0 (multifd, a guest dirtying above the
 * threshold), the pending memory walked down sync after sync by what
 * the windows of a round sent less what the guest dirtied meanwhile, and
 * the syncs came after the fullest windows. Returns the round's windows
 * (the last one in part where the pages ran out) and sets @left. */
static double round_windows(struct run *r, double pages, double per,
			    double *left)
{
	double e = pages * per, n;

	if (r->k_hi == r->k_lo) {
		double win = window_bytes_at(r, r->k_lo);

		*left = ks_mig_round_leftover(pages, r->thr / KS_PAGE,
					      win / per);
		r->win_thr = r->thr;
		return (pages - *left) * per / win;
	}
	/* Windows far from any threshold are taken at their mean: drawn
	 * they would add little, at a cost that grows with what is pending
	 * (which a low max-bandwidth makes as large as RAM). */
	n = floor((e - r->thr_max / KS_PAGE * per) /
		  (r->rate * KS_MIG_WINDOW_S)) -
	    KS_MIG_DRAWN;
	n = n > 0 ? n : 0;
	e -= n * r->rate * KS_MIG_WINDOW_S;
	for (n++;; n++) {
		double w = next_window(r);

		if (e <= w) {
			*left = 0;
			return n - 1 + e / w;
		}
		e -= w;
		if (e / per * KS_PAGE < r->win_thr) {
			*left = e / per;
			return n;
		}
	}
}

/* Up to the next sync: of @pages pending (@b bytes reported, @w on the
 * wire), send all but the leftover; the rest waits for the sync. The
 * first pass is long, so the window it ends in leaves a leftover at any
 * phase (its mean, of the pass's last pages); a round after a sync is
 * whole windows. */
static void send_to_sync(struct run *r, double pages, double normal, double b,
			 double w, bool after_sync)
{
	double per = pages > 0 ? b / pages : 0,
	       perw = pages > 0 ? w / pages : 0;
	double left = 0, left_b = 0, windows = 0;

	if (after_sync && per > 0) {
		windows = round_windows(r, pages, per, &left);
		left_b = left * per;
	} else if (!after_sync) {
		left = ks_mig_first_leftover(&r->in, pages, normal, b,
					     r->thr / KS_PAGE,
					     r->rate * KS_MIG_WINDOW_S, &left_b);
		next_window(r);
	}
	if (left > pages) {
		left = pages;
		left_b = b;
	}
	r->left = left;
	r->left_b = left_b;
	r->left_w = per > 0 ? left_b / per * perw : 0;
	r->bytes = b - r->left_b;
	normal = pages > 0 ? normal * (1 - left / pages) : 0;
	r->t = after_sync ? fmax(windows * KS_MIG_WINDOW_S,
				 cpu_seconds(r, pages - left, normal))
			  : pass_seconds(r, r->bytes, pages - left, normal);
	r->m.wire += w - r->left_w;
}

/* Whether the pending memory after a sync, @pend, has stopped falling:
 * no new low for KS_MIG_STALLED syncs once auto-converge (if on) can
 * throttle no harder. Rounds are whole windows, so the pending memory
 * can rise and fall from sync to sync while it still converges. */
static bool stalled(struct run *r, double pend)
{
	if (ks_mig_new_low(&r->low, &r->stalled, pend))
		return false;
	if (r->th.on && r->th.pct < ks_throttle_max(r->s)) {
		r->stalled = 0;
		return false;
	}
	/* Under the fullest window's threshold, a sync may still complete. */
	return r->stalled >= KS_MIG_STALLED && r->low * KS_PAGE >= r->thr_max;
}

/* The pre-copy rounds after the first sync: true when it converges. */
static bool precopy(struct run *r, uint32_t maxp,
		    struct kvmstats_migrate_prediction *out)
{
	for (;;) {
		double d, pend, pend_b, pend_w;

		if (r->th.pct)
			r->th.throttled_s += r->t;
		d = ks_mig_newly_dirty(dirtied(r, r->t), r->left, r->ws, r->cap,
				       r->left_dirtied, r->apart);
		ks_throttle_sync(&r->th, r->s, r->total_t, r->bytes, d);
		pend = r->left + d;
		pend_b = r->left_b + pass_cost(&r->m, 0, d,
					       d > 0 ? r->in.nblocks : 0,
					       &pend_w);
		pend_w += r->left_w;
		if (pend * KS_PAGE < r->win_thr) {
			/* Stop and copy: the rest, with the VM paused. */
			out->final_bytes = (uint64_t)pend_b;
			out->downtime_s = final_seconds(r, pend_b, pend);
			r->total_b += pend_b;
			r->total_t += out->downtime_s;
			r->m.wire += pend_w;
			out->passes++;
			return true;
		}
		send_to_sync(r, pend, pend, pend_b, pend_w, true);
		r->left_dirtied = true;
		r->total_b += r->bytes;
		r->total_t += r->t;
		out->passes++;
		if (stalled(r, pend) || out->passes >= maxp) {
			snprintf(out->note, sizeof(out->note), "does not converge: "
				 "after %u syncs %.1f MiB are still dirty (%.0f "
				 "pages dirtied in %.2f s) > %.1f MiB allowed in "
				 "the downtime", out->passes,
				 pend * KS_PAGE / 1048576.0, d, r->t,
				 r->thr / 1048576.0);
			return false;
		}
	}
}

int ks_migrate_run(const struct kvmstats_migrate_input *input,
		   const struct kvmstats_migrate_settings *s,
		   const struct kvmstats_compress_estimate *c,
		   struct kvmstats_migrate_prediction *out,
		   struct kvmstats_migrate_detail *d, unsigned int flags)
{
	struct run r = { .s = s, .th = { .on = s && s->auto_converge },
			 .apart = flags & KS_MIG_RUN_APART, .low = INFINITY };
	double normal, first, wire;
	uint32_t maxp;
	int err = ks_opts_copy(&r.in, sizeof(r.in), input);

	if (err || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	r.m = (struct mech){ &r.in, s, c, 0 };
	r.bw = r.in.bandwidth > 0 ? r.in.bandwidth
				  : (double)KVMSTATS_QEMU_MAX_BANDWIDTH;
	/* The rate the transfer runs at: multifd's can exceed the limit. */
	if (s && s->multifd) {
		inflight(&r.in, s, &r.k_lo, &r.k_hi);
		r.rate = ks_multifd_bandwidth(s, r.bw, r.k_lo, r.k_hi);
	} else {
		r.rate = legacy_rate(s, r.bw);
	}
	r.downtime = r.in.downtime_s > 0 ? r.in.downtime_s
					 : KVMSTATS_QEMU_DOWNTIME_MS / 1e3;
	r.thr = threshold(&r, r.rate * KS_MIG_WINDOW_S);
	r.thr_max = threshold(&r, window_bytes_at(&r, r.k_hi));
	r.rng = KS_MIG_SEED * (KS_MIG_RUN_PATH_OF(flags) + 1);
	maxp = r.in.max_passes ? r.in.max_passes : KS_MIG_MAX_SYNCS;
	r.cap = (double)(r.in.zero_pages + r.in.nonzero_pages +
			 r.in.unknown_pages);
	r.walk = walk_per_page(&r.in, s);
	r.ws = ks_mig_working_set(r.in.curve, r.in.npoints, r.cap);
	out->assumed_clean = !r.in.curve || !r.in.npoints;
	if (!out->assumed_clean && r.in.curve[r.in.npoints - 1].t > 0)
		out->dirty_pages_per_second =
			r.in.curve[r.in.npoints - 1].pages /
			r.in.curve[r.in.npoints - 1].t;

	normal = (double)(r.in.nonzero_pages + r.in.unknown_pages);
	first = pass_cost(&r.m, (double)r.in.zero_pages, normal, r.in.nblocks,
			  &wire);
	out->first_pass_bytes = (uint64_t)first;
	send_to_sync(&r, r.cap, normal, first, wire, false);
	r.total_b = r.bytes + (s ? ks_migrate_fixed_bytes(s) : 0);
	r.total_t = r.t + (s ? KS_MIG_SETUP_S : 0);
	out->passes = 1;
	if (s && s->postcopy && (r.left + dirtied(&r, r.t)) * KS_PAGE >= r.win_thr)
		switch_to_postcopy(&r, dirtied(&r, r.t), out);
	else
		out->converges = precopy(&r, maxp, out);
	out->bytes = (uint64_t)r.total_b;
	out->seconds = r.total_t;
	if (d) {
		d->max_throttle = r.th.max;
		d->throttled_s = r.th.throttled_s;
		d->effective_bw = r.rate;
		d->walk_rate = r.walk > 0 ? KS_PAGE / r.walk : 0;
		d->walk_s = r.cap * r.walk;
		d->cpus = (uint32_t)source_cpus(&r.in);
		d->cpus_source = r.in.cpus ? "affinity" : "host";
		d->link_bw = r.in.link_bw;
		d->vmm_busy = r.in.vmm_busy;
		d->windows_vary = r.k_hi > r.k_lo;
		d->wire_bytes = (uint64_t)(r.m.wire +
					   (s ? ks_migrate_fixed_bytes(s) : 0));
	}
	if (out->converges && !out->postcopy)
		snprintf(out->note, sizeof(out->note),
			 "%u passes, %.0f ms downtime%s%s%s", out->passes,
			 out->downtime_s * 1e3,
			 r.in.link_bw > 0 || !out->downtime_s
				 ? ""
				 : " (at max-bandwidth: --link gives the link's)",
			 out->assumed_clean
				 ? "; assumed a clean guest (no dirty rate)"
				 : "",
			 r.cap * r.walk > first / r.rate
				 ? "; the first pass is paced by QEMU's zero test"
				 : "");
	return 0;
}

int kvmstats_migrate__predict(const struct kvmstats_migrate_input *input,
			      struct kvmstats_migrate_prediction *out)
{
	return ks_migrate_predict(input, NULL, NULL, out, NULL);
}
