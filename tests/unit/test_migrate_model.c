// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The migration model's verdict and intervals (the dirty curve's and the
 * zero estimate's uncertainty carried through), post-copy, auto-converge
 * at its throttle limit, the pending pages as a bitmap's union over the
 * guest's working set, the curve's first points read as their line, and
 * the ranking by verdict.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "../../lib/mem_internal.h"

#define BW (32.0 * 1048576)	/* 32 MiB/s: 8176 pages of 4104 bytes a second */

/* A guest dirtying @rate pages/s (linear: a working set larger than what
 * is sent), its 95% interval +-@spread of it, sampled at 1/8 .. 1 s. */
static void linear_curve(struct kvmstats_dirty_point *c, double rate, double spread)
{
	for (int i = 0; i < 4; i++) {
		c[i].t = 1.0 / (double)(1u << (3 - i));
		c[i].pages = rate * c[i].t;
		c[i].lo = c[i].pages * (1 - spread);
		c[i].hi = c[i].pages * (1 + spread);
	}
}

/* A guest rewriting all of a working set of @ws pages at 16384 pages/s:
 * its curve levels off at @ws (sampled at 1/8 .. 1 s). */
static void saturated_curve(struct kvmstats_dirty_point *c, double ws)
{
	for (int i = 0; i < 4; i++) {
		c[i].t = 1.0 / (double)(1u << (3 - i));
		c[i].pages = c[i].lo = c[i].hi = fmin(16384 * c[i].t, ws);
	}
}

static struct kvmstats_migrate_input input(const struct kvmstats_dirty_point *c)
{
	return (struct kvmstats_migrate_input){
		.sz = sizeof(struct kvmstats_migrate_input),
		.zero_pages = 30000, .nonzero_pages = 35536, .nblocks = 1,
		.block_name_bytes = 6, .curve = c, .npoints = 4,
		.bandwidth = BW, .downtime_s = 0.3,
	};
}

/* What QEMU has left of the bitmap at a sync: its estimate is read once a
 * 100 ms window (BW / 10 bytes of pages at @per bytes each), and falls
 * under the threshold (BW x 0.3 s in pages of 4096) somewhere in one. */
static double leftover_at(double rate, double per)
{
	double w = rate / 10 / per, thr = rate * 0.3 / 4096;

	return w <= thr ? thr - w / 2 : thr * thr / (2 * w);
}

static double leftover(double per)
{
	return leftover_at(BW, per);
}

/* QEMU 10's legacy pre-copy at BW: each 100 ms budget checked in flushes
 * of 32 pages (4104 bytes each), the one that crosses it sent whole: 26
 * of them a window. */
#define BW10 (26 * 32 * 4104.0 * 10)

static void predict(double rate, double spread, struct kvmstats_migrate_prediction *p)
{
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_input in;

	linear_curve(c, rate, spread);
	in = input(c);
	assert_int_equal(kvmstats_migrate__predict(&in, p), 0);
}

/* lo <= point <= hi, for time and bytes, zero estimate's interval too. */
static void test_interval_order(void **state)
{
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_prediction p, exact;
	struct kvmstats_migrate_input in;

	(void)state;
	linear_curve(c, 2000, 0.2);
	in = input(c);
	in.zero_lo = 29000;
	in.zero_hi = 31000;
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	assert_true(p.converges);
	assert_true(p.seconds_lo < p.seconds && p.seconds < p.seconds_hi);
	assert_true(p.bytes_lo < (double)p.bytes && (double)p.bytes < p.bytes_hi);
	/* The zero interval alone widens it: 1000 pages x 4095 bytes each way. */
	in.zero_lo = in.zero_hi = 0;
	assert_int_equal(kvmstats_migrate__predict(&in, &exact), 0);
	assert_true(p.bytes_hi - exact.bytes_hi > 1000 * 4095.0 * 0.99);
	assert_true(exact.bytes_lo - p.bytes_lo > 1000 * 4095.0 * 0.99);
	/* No curve: a clean guest, the interval is the zero estimate's only. */
	in.curve = NULL;
	in.npoints = 0;
	assert_int_equal(kvmstats_migrate__predict(&in, &exact), 0);
	assert_true(exact.assumed_clean);
	assert_true(exact.bytes_lo <= (double)exact.bytes &&
		    (double)exact.bytes <= exact.bytes_hi);
}

/* Near the threshold (8176 pages/s at 32 MiB/s) the bounds disagree. */
static void test_uncertain(void **state)
{
	struct kvmstats_migrate_prediction p;

	(void)state;
	predict(8000, 0.25, &p);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_UNCERTAIN);
	assert_false(isnan(p.seconds_lo));
	assert_true(isnan(p.seconds_hi));
	assert_true(isnan(p.bytes_hi));
	assert_string_equal(kvmstats_verdict_str(p.verdict), "uncertain");
	/* A narrower interval (a longer sample) decides. */
	predict(6000, 0.05, &p);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	predict(20000, 0.25, &p);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_NO);
	assert_false(p.converges);
	assert_true(isnan(p.seconds_lo) && isnan(p.seconds_hi));
	assert_string_equal(kvmstats_verdict_str(p.verdict), "does-not-converge");
}

/* The rate of legacy pre-copy under max-bandwidth: 7.2 counts bytes as it
 * queues them and keeps to the limit; 8.x+ counts them as it flushes them
 * (32 pages a flush), and at 4 MiB/s a 419 KB budget takes 4 flushes of
 * 131 KB: 1.25x, as QEMU 10.0 measured (1.26x). */
static void test_legacy_rate(void **state)
{
	struct kvmstats_migrate_settings s = { .qemu_major = 7, .qemu_minor = 2 };
	struct kvmstats_migrate_input in = input(NULL);
	struct kvmstats_migrate_prediction p7, p10;

	(void)state;
	in.npoints = 0;
	in.bandwidth = 4.0 * 1048576;
	ks_migrate_defaults(&s);
	s.bandwidth = in.bandwidth;
	s.downtime_s = 0.3;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p7, NULL), 0);
	s.qemu_major = 10;
	s.qemu_minor = 0;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p10, NULL), 0);
	assert_true(p7.converges && p10.converges);
	/* The same bytes but for 10's device state, at 1.25x the pace. */
	assert_true(fabs((double)p10.first_pass_bytes -
			 (double)p7.first_pass_bytes) < 1);
	assert_true(fabs((p7.seconds - 0.07) / (p10.seconds - 0.07) - 1.25) < 0.02);
}

/* Post-copy always completes: the first pass, the switch, the pages
 * dirtied meanwhile sent after it. */
static void test_postcopy(void **state)
{
	struct kvmstats_migrate_settings s = { .qemu_major = 10 };
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_prediction p, fast;
	struct kvmstats_migrate_input in;
	double first_s, dirty, left;

	(void)state;
	ks_migrate_defaults(&s);
	s.bandwidth = BW;
	s.downtime_s = 0.3;
	s.postcopy = true;
	linear_curve(c, 10000, 0.25);	/* under the cap of 65536 pages */
	in = input(c);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, NULL), 0);
	assert_true(p.postcopy);
	assert_true(p.converges);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	assert_int_equal(p.passes, 1);
	/* The switch at the first sync: pass 0 but its leftover sent, then
	 * post-copy sends the leftover and the pages dirtied until then. */
	left = leftover_at(BW10, (double)p.first_pass_bytes / 65536) *
	       p.first_pass_bytes / 65536;
	first_s = ((double)p.first_pass_bytes - left) / BW10;
	dirty = 10000 * first_s;
	assert_true(fabs((double)p.postcopy_bytes - (dirty * 4104 + 8 + left)) <
		    2);
	/* max-postcopy-bandwidth 0 is unlimited: taken as max-bandwidth. */
	assert_true(fabs(p.postcopy_bw - BW) < 1);
	assert_true(fabs(p.postcopy_s - ((double)p.postcopy_bytes / BW)) < 1e-6);
	assert_true(fabs(p.seconds - (first_s + 0.07 + p.downtime_s + p.postcopy_s)) < 1e-6);
	/* The downtime: device state and discard ranges only. */
	assert_true(p.downtime_s < 0.1);
	assert_true(p.seconds_lo <= p.seconds && p.seconds <= p.seconds_hi);
	s.postcopy_bw = 2 * BW;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &fast, NULL), 0);
	assert_true(fabs(fast.postcopy_s * 2 - p.postcopy_s) < 1e-6);
	/* A guest quiet enough stops after the first pass: no switch. */
	linear_curve(c, 100, 0.25);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, NULL), 0);
	assert_false(p.postcopy);
	assert_true(p.converges);
	assert_int_equal(p.passes, 2);
}

/* The stop-and-copy runs unlimited (ram_save_complete() flushes
 * regardless of max-bandwidth): at the link's speed where it is given,
 * else at the limit's. The same bytes; the downtime and the total time
 * shorter by what the link saves; post-copy too. */
static void test_link(void **state)
{
	struct kvmstats_migrate_settings s = { .qemu_major = 7, .qemu_minor = 2 };
	struct kvmstats_migrate_prediction at_bw, at_link;
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_input in;

	(void)state;
	ks_migrate_defaults(&s);
	s.bandwidth = BW;
	s.downtime_s = 0.3;
	linear_curve(c, 500, 0.25);
	in = input(c);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &at_bw, NULL), 0);
	in.link_bw = 100 * BW;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &at_link, NULL), 0);
	assert_true(at_bw.converges && at_link.converges);
	assert_true(at_bw.final_bytes > 0);
	assert_true(fabs(at_bw.downtime_s - (double)at_bw.final_bytes / BW) < 1e-6);
	assert_true(fabs(at_link.downtime_s * 100 - at_bw.downtime_s) < 1e-6);
	assert_int_equal(at_link.bytes, at_bw.bytes);
	assert_true(fabs((at_bw.seconds - at_link.seconds) -
			 (at_bw.downtime_s - at_link.downtime_s)) < 1e-6);
	assert_non_null(strstr(at_bw.note, "--link"));
	assert_null(strstr(at_link.note, "--link"));
	/* Post-copy without max-postcopy-bandwidth: at the link's speed. */
	s.postcopy = true;
	linear_curve(c, 10000, 0.25);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &at_link, NULL), 0);
	assert_true(at_link.postcopy);
	assert_true(fabs(at_link.postcopy_bw - 100 * BW) < 1);
}

/* Auto-converge converges unless even max-cpu-throttle cannot slow the
 * guest under the bandwidth; it says what throttle and for how long. */
static void test_auto_converge_limit(void **state)
{
	struct kvmstats_migrate_settings s = { .qemu_major = 7, .qemu_minor = 2 };
	struct kvmstats_migrate_detail d = { 0 };
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_prediction p;
	struct kvmstats_migrate_input in;

	(void)state;
	ks_migrate_defaults(&s);
	assert_int_equal(s.throttle_max, 99);
	s.bandwidth = BW;
	s.downtime_s = 0.3;
	s.auto_converge = true;
	linear_curve(c, 20000, 0.1);
	in = input(c);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, &d), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	assert_true(d.max_throttle >= 60 && d.max_throttle <= 99);
	assert_true(d.throttled_s > 0 && d.throttled_s < p.seconds);
	/* At most 50%: 10000 pages/s left, more than 8176 sent. */
	s.throttle_max = 50;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, &d), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_NO);
	assert_int_equal(d.max_throttle, 50);
}

/* The first pass's leftover: without a tail, its pages at the pass's
 * mean cost (the uniform phase's thr - w/2, or thr^2/2w for a window
 * that can send them all); a tail of never-touched pages leaves almost
 * nothing (traced on QEMU 10.0: 55 pages of ROMs, where the mean left
 * 955); one of data leaves more than the mean of a mostly-zero pass. */
static void test_first_leftover(void **state)
{
	const double pages = 32898, normal = 8308, thr = 2501;
	const double bytes = (pages - normal) * 9 + normal * 4104, per = bytes / pages;
	struct kvmstats_tail_point zero_top[] = {
		{ 64, 64 }, { 128, 100 }, { 4096, 100 }, { 8192, 100 } };
	struct kvmstats_tail_point data_top[] = { { 4096, 4096 } };
	struct kvmstats_migrate_input in = { .sz = sizeof(in) };
	double l, lb, win;

	(void)state;
	/* The window sends more than the threshold's pages at the mean. */
	win = 3414528;
	l = ks_mig_first_leftover(&in, pages, normal, bytes, thr, win, &lb);
	assert_true(fabs(l - thr * thr / (2 * (win / per))) < 0.5);
	assert_true(fabs(lb - l * per) < 1);
	/* A window of fewer: thr - w/2. */
	win = 1e6;
	l = ks_mig_first_leftover(&in, pages, normal, bytes, thr, win, &lb);
	assert_true(fabs(l - (thr - win / per / 2)) < 0.5);

	win = 3414528;
	in.tail = zero_top;
	in.ntail = 4;
	l = ks_mig_first_leftover(&in, pages, normal, bytes, thr, win, &lb);
	/* The last 2501 pages cost 100 x 4104 + 2401 x 9 bytes, ~12% of a
	 * window: left at the sync one time in 8, ~50 pages then. */
	assert_true(l > 1 && l < 15);
	assert_true(lb < 100 * 4104.0);
	in.tail = data_top;
	in.ntail = 1;
	l = ks_mig_first_leftover(&in, pages, normal, bytes, thr, win, &lb);
	assert_true(l > thr - win / 4104 / 2 - 1 && l < thr);
	assert_true(fabs(lb - l * 4104) < 4104);
	/* A tail that says more data than the pass has is bounded by it. */
	in.tail = data_top;
	l = ks_mig_first_leftover(&in, pages, 100, pages * 9 + 100 * 4095.0, thr,
				  win, &lb);
	assert_true(l >= 0 && l < 100);
}

/* QEMU syncs the bitmap only when its estimate falls under the
 * threshold, and what is still pending then stays pending: a sync stops
 * pre-copy only when the pages dirtied since the previous one fit in
 * what the leftover leaves of the threshold (half a window's pages), not
 * the whole threshold. A linear guest's rounds shrink by q = its rate
 * over the bandwidth's pages (less the share of its writes that fall on
 * the leftover, spread over all 65536 pages: its curve does not level
 * off), from D1 (dirtied during pass 0) until they are under half a
 * window. */
static void test_sync_at_threshold(void **state)
{
	struct kvmstats_migrate_prediction p;
	double win = BW / 10 / 4104, thr = BW * 0.3 / 4096,
	       left = leftover(4104);
	double q = 7168 * 4104 / BW * (1 - left / 65536), d1, want;

	(void)state;
	predict(7168, 0, &p);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	d1 = 7168 * (double)p.first_pass_bytes / BW;
	want = ceil(log(d1 / (win / 2)) / log(1 / q));
	/* pass 0, the rounds, the stop and copy (+-1: the first round
	 * starts from pass 0's smaller leftover). */
	assert_true(p.passes >= want + 1 && p.passes <= want + 3);
	/* Stopping at D < threshold would take 9 rounds fewer. */
	assert_true(p.passes > ceil(log(d1 / thr) / log(1 / q)) + 6);
	/* The stop and copy sends the leftover and what was dirtied since. */
	assert_true((double)p.final_bytes >= left * 4104);
	assert_true((double)p.final_bytes < thr * 4104);
}

/* The threshold is the bandwidth QEMU measured (multifd's, beyond
 * max-bandwidth) or avail-switchover-bandwidth where set. */
static void test_threshold_bandwidth(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 10};
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_prediction p;
	struct kvmstats_migrate_input in;

	(void)state;
	ks_migrate_defaults(&s);
	s.bandwidth = BW;
	s.downtime_s = 0.3;
	linear_curve(c, 9000, 0); /* over the 8176 pages/s sent */
	in = input(c);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, NULL), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_NO);
	/* Told the switchover may use 40x: 384 MiB, the whole 256 MiB guest,
	 * fit in the downtime. */
	s.switchover_bw = 40 * BW;
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, NULL), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_CONVERGES);
	assert_int_equal(p.passes, 2);
	assert_true(p.downtime_s > 0.3);
}

/* Multifd's rate limit is on the total, never per channel: 7.2 accounts
 * a packet against the main channel's limit when it hands it to a
 * channel (one packet in hand beyond it, whatever the channels), 8.0+
 * once a channel sent it: whole packets past the budget (7 at 32 MiB/s),
 * then one per busy channel in flight, up to 4; from none to all where
 * busy vCPUs share the migration threads' CPUs. */
static void test_multifd_rate(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 7, .qemu_minor = 2};
	double packet = 128 * 4096 * 10.0, wire = 525632 * 10.0, r2, r8;
	unsigned int lo, hi;

	(void)state;
	ks_migrate_defaults(&s);
	s.bandwidth = BW;
	s.multifd = true;
	s.channels = 2;
	r2 = ks_multifd_bandwidth(&s, BW, 0, 0);
	s.channels = 8;
	r8 = ks_multifd_bandwidth(&s, BW, 0, 0);
	assert_true(fabs(r2 - (BW + packet)) < 1 && fabs(r8 - r2) < 1);
	assert_int_equal(ks_multifd_inflight(&s), 0);
	s.qemu_major = 10;
	s.qemu_minor = 0;
	s.channels = 2;
	ks_multifd_inflight_range(&s, 2, 0, &lo, &hi);
	assert_true(lo == 2 && hi == 2);
	assert_true(fabs(ks_multifd_bandwidth(&s, BW, lo, hi) - 9 * wire) < 1);
	s.channels = 8;
	/* A guest keeping one of two CPUs busy: 0 to 4. */
	ks_multifd_inflight_range(&s, 2, 1, &lo, &hi);
	assert_true(lo == 0 && hi == 4);
	assert_true(fabs(ks_multifd_bandwidth(&s, BW, lo, hi) - 9 * wire) < 1);
	/* ... but not on 16 CPUs, nor with a vCPU a tenth busy. */
	ks_multifd_inflight_range(&s, 16, 1, &lo, &hi);
	assert_int_equal(lo, 4);
	ks_multifd_inflight_range(&s, 2, 0.1, &lo, &hi);
	assert_int_equal(lo, 4);
	assert_true(fabs(ks_multifd_bandwidth(&s, BW, lo, hi) - 11 * wire) < 1);
	assert_true(ks_multifd_bandwidth(&s, BW, lo, hi) < 2 * BW);
}

/* Multifd 8.x+ windows vary by the packets in flight where the guest's
 * busy vCPUs share the migration threads' CPUs, so a guest that
 * rewrites 6144 pages at 16384 a second, near the threshold, takes more
 * or fewer syncs as they fall: the verdict runs many paths, each drawing
 * its windows (reproducibly), and predicts their median. They do not
 * vary with an idle guest, nor on 7.2. */
static void test_multifd_windows(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 10};
	struct kvmstats_migrate_prediction p, q;
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_input in;
	bool differ = false;

	(void)state;
	ks_migrate_defaults(&s);
	s.bandwidth = BW;
	s.downtime_s = 0.3;
	s.multifd = true;
	s.channels = 4;
	saturated_curve(c, 6144);
	in = input(c);
	in.cpus = 2;
	assert_false(ks_migrate_windows_vary(&in, &s));
	in.vmm_busy = 1;
	assert_true(ks_migrate_windows_vary(&in, &s));
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &p, NULL, KS_MIG_RUN_PATH(0)), 0);
	for (unsigned int i = 1; i < 31 && !differ; i++) {
		assert_int_equal(ks_migrate_run(&in, &s, NULL, &q, NULL, KS_MIG_RUN_PATH(i)), 0);
		differ = q.bytes != p.bytes;
	}
	assert_true(differ);
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &q, NULL, KS_MIG_RUN_PATH(0)), 0);
	assert_int_equal(q.bytes, p.bytes);
	assert_int_equal(ks_migrate_predict(&in, &s, NULL, &p, NULL), 0);
	assert_true(p.converges);
	assert_true(p.bytes_lo < (double)p.bytes && p.seconds_lo < p.seconds);
	s.qemu_major = 7;
	s.qemu_minor = 2;
	assert_false(ks_migrate_windows_vary(&in, &s));
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &p, NULL, KS_MIG_RUN_PATH(0)), 0);
	for (unsigned int i = 1; i < 31; i++) {
		assert_int_equal(ks_migrate_run(&in, &s, NULL, &q, NULL, KS_MIG_RUN_PATH(i)), 0);
		assert_int_equal(q.bytes, p.bytes);
	}
}

/* Auto-converge's schedule, as migration_trigger_throttle() runs it: a
 * period ends at the first sync a second or more after it began; a period
 * whose dirtied bytes exceed half the bytes sent in it counts, and every
 * second such period starts the throttle at cpu-throttle-initial or
 * raises it by cpu-throttle-increment, up to max-cpu-throttle. */
static void test_throttle_schedule(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 7, .qemu_minor = 2};
	struct ks_throttle th = {.on = true};
	const double sent = 32e6, busy = 16e6 / 4096 + 1, quiet = 16e6 / 4096;

	(void)state;
	ks_migrate_defaults(&s);
	s.throttle_max = 35;
	ks_throttle_sync(&th, &s, 1.0, sent, busy);
	assert_int_equal(th.pct, 0);
	/* Within the second: no decision, the period goes on. */
	ks_throttle_sync(&th, &s, 1.5, sent, busy);
	assert_int_equal(th.pct, 0);
	ks_throttle_sync(&th, &s, 2.0, sent, busy);
	assert_int_equal(th.pct, 20);
	/* Exactly half is not over the threshold. */
	ks_throttle_sync(&th, &s, 3.0, sent, quiet);
	ks_throttle_sync(&th, &s, 4.0, sent, busy);
	assert_int_equal(th.pct, 20);
	ks_throttle_sync(&th, &s, 5.0, sent, busy);
	assert_int_equal(th.pct, 30);
	ks_throttle_sync(&th, &s, 6.0, sent, busy);
	ks_throttle_sync(&th, &s, 7.0, sent, busy);
	assert_int_equal(th.pct, 35);
	assert_int_equal(th.max, 35);
	/* throttle-trigger-threshold 60: 55% no longer counts. */
	th = (struct ks_throttle){ .on = true };
	s.throttle_trigger = 60;
	for (int i = 1; i <= 4; i++)
		ks_throttle_sync(&th, &s, i, sent, 0.55 * sent / 4096);
	assert_int_equal(th.pct, 0);
	/* Tailslow: at 20%, dirtying 40 MB for 32 MB sent (a threshold of
	 * 16 MB), the CPU share that would match it is 80% x 16 / 40 = 32%:
	 * a step of 48, more than the increment: 30. Dirtying 52% of the
	 * sent: 80 - (int)(80 x 0.50 / 0.52) = 80 - 76, a step of 4: 24. */
	s.throttle_trigger = 50;
	s.throttle_max = 99;
	s.throttle_tailslow = true;
	th = (struct ks_throttle){ .on = true, .pct = 20, .period_t = 0 };
	ks_throttle_sync(&th, &s, 1.0, sent, 40e6 / 4096);
	ks_throttle_sync(&th, &s, 2.0, sent, 40e6 / 4096);
	assert_int_equal(th.pct, 30);
	th = (struct ks_throttle){ .on = true, .pct = 20, .period_t = 0 };
	ks_throttle_sync(&th, &s, 1.0, sent, 0.52 * sent / 4096);
	ks_throttle_sync(&th, &s, 2.0, sent, 0.52 * sent / 4096);
	assert_int_equal(th.pct, 24);
}

/* Before the curve's first point, a guest that writes 16384 pages a
 * second at random over 8192 (W(1 - exp(-rt/W)), sampled at 0.25 s and
 * on) is read as that curve, not as the straight line to its first point
 * (16% short at 0.07 s: the short rounds near a stop-and-copy); a curve
 * with no working set (RAM is its bound) stays a line. */
static void test_dirtied_at(void **state)
{
	struct kvmstats_dirty_point c[4];
	double ws, cap = 32768, t = 0.07, want = -8192 * expm1(-2 * t);

	(void)state;
	for (int i = 0; i < 4; i++) {
		c[i].t = 0.25 * (double)(1u << i);
		c[i].pages = c[i].lo = c[i].hi = -8192 * expm1(-2 * c[i].t);
	}
	ws = ks_mig_working_set(c, 4, cap);
	assert_true(ws > 8000 && ws < 8800);
	assert_true(kvmstats_dirty_curve_at(c, 4, t, cap) < 0.9 * want);
	assert_true(fabs(ks_mig_dirtied_at(c, 4, t, ws, cap) - want) < 0.02 * want);
	/* Through the first point, and the curve itself past it. */
	assert_true(fabs(ks_mig_dirtied_at(c, 4, 0.25, ws, cap) - c[0].pages) < 1e-6);
	assert_true(ks_mig_dirtied_at(c, 4, 0.75, ws, cap) ==
		    kvmstats_dirty_curve_at(c, 4, 0.75, cap));
	saturated_curve(c, cap);
	assert_true(ks_mig_dirtied_at(c, 4, 0.05, cap, cap) ==
		    kvmstats_dirty_curve_at(c, 4, 0.05, cap));
}

/* A sync sets bits: a guest that rewrites all of its working set leaves
 * no more than all of it pending (the leftover is in it), not the
 * leftover plus all of it (the high bound, its writes as far apart from
 * the leftover as can be); written uniformly over it (the estimate), the
 * leftover's share of its writes fall on pages still pending. */
static void test_working_set(void **state)
{
	struct kvmstats_dirty_point c[4];
	struct kvmstats_migrate_input in;
	struct kvmstats_migrate_prediction p, u;
	/* A round sends whole windows of what is pending, until what is
	 * left is under the threshold (BW x 0.3 s): between all of the
	 * working set and all but the threshold's pages. */
	double most = 8192 * KVMSTATS_QEMU_NORMAL_PAGE_BYTES,
	       least = most - BW * 0.3 / 4096 * KVMSTATS_QEMU_NORMAL_PAGE_BYTES;

	(void)state;
	saturated_curve(c, 8192);
	in = input(c);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &p, NULL, KS_MIG_RUN_APART), 0);
	assert_false(p.converges);
	/* Pass 0, then rounds (until they stop shrinking) of at most the
	 * working set's pages (their block flags and EOS aside), the
	 * leftover pending among them. */
	assert_true(p.passes >= 3);
	assert_true((double)p.bytes <=
		    (double)p.first_pass_bytes + (p.passes - 1) * (most + 64));
	assert_true((double)p.bytes >
		    (double)p.first_pass_bytes + (p.passes - 2) * least);
	/* Uniform, a quarter of its writes fall on the 2048 pages left: it
	 * still dirties 1.5x what is sent. */
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &u, NULL, KS_MIG_RUN_UNIFORM), 0);
	assert_false(u.converges);
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_NO);

	/* 3000 pages: more than the threshold's 2457 (BW x 0.3 s), so all
	 * of it pending never fits; uniform, 68% of its writes fall on the
	 * 2048 pages left pending: it converges. Which pages it writes
	 * decides: uncertain, the estimate the uniform run, no upper bound. */
	saturated_curve(c, 3000);
	in = input(c);
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	assert_int_equal(p.verdict, KVMSTATS_VERDICT_UNCERTAIN);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &u, NULL, KS_MIG_RUN_UNIFORM), 0);
	assert_true(p.converges && u.converges);
	assert_int_equal(p.bytes, u.bytes);
	assert_true(isnan(p.seconds_hi));
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &u, NULL, KS_MIG_RUN_APART), 0);
	assert_false(u.converges);

	/* A curve still rising as it began shows no working set: all of
	 * RAM, where few writes fall on the leftover. */
	linear_curve(c, 4000, 0);
	in = input(c);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &p, NULL, KS_MIG_RUN_APART), 0);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &u, NULL, KS_MIG_RUN_UNIFORM), 0);
	assert_true(p.converges && u.converges);
	assert_true(u.bytes <= p.bytes && (double)u.bytes > 0.95 * (double)p.bytes);
}

/* First points on one line through 0 stand for the line fitted to them
 * all: a sample off by +6% at its shortest point and -1% at its longest
 * predicts as the line does; a curve that bends is read as it is. */
static void test_fit_line(void **state)
{
	const double err[4] = { 0.06, 0.03, 0, -0.01 }, rate = 7000;
	struct kvmstats_dirty_point c[4], line[4];
	struct kvmstats_migrate_input in;
	struct kvmstats_migrate_prediction p, q;
	double pages = 0, secs = 0;

	(void)state;
	linear_curve(c, rate, 0.12);
	for (int i = 0; i < 4; i++) {
		c[i].pages *= 1 + err[i];
		pages += c[i].pages;
		secs += c[i].t;
	}
	linear_curve(line, pages / secs, 0.12);
	in = input(c);
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	in = input(line);
	assert_int_equal(kvmstats_migrate__predict(&in, &q), 0);
	assert_true(p.converges && q.converges);
	assert_true(fabs((double)p.bytes - (double)q.bytes) <= 1);
	assert_true(fabs(p.seconds - q.seconds) < 1e-9);
	/* Read point by point, the same sample predicts otherwise (by
	 * 6% here: a guest near the threshold). */
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &q, NULL, 0), 0);
	in = input(c);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &p, NULL, 0), 0);
	assert_true(fabs((double)p.bytes / (double)q.bytes - 1) > 0.03);

	/* Levelling off at 4000 pages: not a line, read as measured. */
	saturated_curve(c, 4000);
	in = input(c);
	assert_int_equal(kvmstats_migrate__predict(&in, &p), 0);
	assert_int_equal(ks_migrate_run(&in, NULL, NULL, &q, NULL, 0), 0);
	assert_int_equal(p.bytes, q.bytes);
}

/* Surely converging first, then uncertain, then not; by time within. */
static void test_ranking(void **state)
{
	static struct kvmstats_plan_vm v[5];
	const struct kvmstats_plan_vm *order[5];
	const enum kvmstats_verdict verdict[5] = {
		KVMSTATS_VERDICT_CONVERGES, KVMSTATS_VERDICT_UNCERTAIN,
		KVMSTATS_VERDICT_NO, KVMSTATS_VERDICT_CONVERGES,
		KVMSTATS_VERDICT_CONVERGES,
	};
	const double secs[5] = { 10, 1, 0.5, 2, 0.1 };
	const pid_t want[5] = { 4, 1, 2, 3, 5 };

	(void)state;
	for (int i = 0; i < 5; i++) {
		v[i].pid = i + 1;
		v[i].predicted = true;
		v[i].pred.verdict = verdict[i];
		v[i].pred.seconds = secs[i];
		order[i] = &v[i];
	}
	v[4].error = -ESRCH;	/* failed: last, whatever its figures */
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++)
			if (kvmstats_plan_vm__compare(order[j], order[i]) < 0) {
				const struct kvmstats_plan_vm *t = order[i];

				order[i] = order[j];
				order[j] = t;
			}
	for (int i = 0; i < 5; i++)
		assert_int_equal(order[i]->pid, want[i]);
}

/* QEMU tests every page of the first pass for zero before it sends it:
 * a mostly-zero guest on a fast link is paced by that walk (at the rate
 * our scan timed), by the channels' where multifd tests (9.0+), and not
 * at all with zero-page-detection=none. The bytes never change. */
static void test_walk(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 10};
	struct kvmstats_migrate_input in = {
		.sz = sizeof(in), .zero_pages = 260000, .nonzero_pages = 2144,
		.nblocks = 1, .block_name_bytes = 6, .bandwidth = 1073741824.0,
		.downtime_s = 0.3,
	};
	struct kvmstats_migrate_prediction none, slow, fast;
	struct kvmstats_migrate_detail d;
	double walk = 262144 * 4096.0 / 1e8, testers;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	(void)state;
	assert_int_equal(kvmstats_migrate__predict(&in, &none), 0);
	assert_true(none.seconds < 0.1);
	in.walk_rate = 1e8;
	assert_int_equal(kvmstats_migrate__predict(&in, &slow), 0);
	assert_true(slow.seconds >= walk && slow.seconds < walk + 0.1);
	assert_int_equal(slow.bytes, none.bytes);
	assert_non_null(strstr(slow.note, "paced by QEMU's zero test"));
	/* Fast enough: the bandwidth decides, as without the walk. */
	in.walk_rate = 1e12;
	assert_int_equal(kvmstats_migrate__predict(&in, &fast), 0);
	assert_true(fabs(fast.seconds - none.seconds) < 1e-6);
	assert_null(strstr(fast.note, "zero test"));

	ks_migrate_defaults(&s);
	s.bandwidth = in.bandwidth;
	s.multifd = true;
	s.channels = 4;
	s.zero_detect = KVMSTATS_MIG_ZERO_MULTIFD;
	in.walk_rate = 1e8;
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &slow, &d, 0), 0);
	testers = cpus < 1 ? 1 : cpus < 4 ? (double)cpus : 4;
	assert_true(fabs(d.walk_rate - 1e8 * testers) < 1);
	assert_true(fabs(d.walk_s - walk / testers) < 1e-6);
	assert_true(slow.seconds >= walk / testers);
	s.multifd = false;
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &slow, &d, 0), 0);
	assert_true(fabs(d.walk_rate - 1e8) < 1);
	s.zero_detect = KVMSTATS_MIG_ZERO_NONE;
	assert_int_equal(ks_migrate_run(&in, &s, NULL, &slow, &d, 0), 0);
	assert_true(d.walk_rate == 0 && d.walk_s == 0);
	assert_true(slow.seconds < walk / 2);
}

/* A pass costs the source's CPUs the zero test of every page and the
 * compression of the others. Where the channels test (9.0+ multifd), a
 * channel does both, one after the other: the times add up, over the
 * channels on the CPUs. Where the migration thread tests, it tests while
 * the channels compress. 1 GiB: zero test 1.07 s, compression 1 s, on
 * one thread each; a link that never limits (1 GiB/s for 10 MB), and a
 * downtime that leaves little for the last pass. */
/* QEMU 10's multifd with 4 channels and zstd, zero pages found in them. */
static void multifd4_zstd(struct kvmstats_migrate_settings *s, double bw)
{
	ks_migrate_defaults(s);
	s->bandwidth = bw;
	s->multifd = true;
	s->channels = 4;
	s->compress = KVMSTATS_MIG_COMPRESS_ZSTD;
	s->zero_detect = KVMSTATS_MIG_ZERO_MULTIFD;
}

static void test_cpu_work(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 10};
	struct kvmstats_migrate_input in = {
		.sz = sizeof(in), .zero_pages = 200000, .nonzero_pages = 62144,
		.nblocks = 1, .block_name_bytes = 6, .bandwidth = 1073741824.0,
		.downtime_s = 0.01, .walk_rate = 1e9,
	};
	struct kvmstats_compress_estimate c = {
		.valid = true, .method = KVMSTATS_MIG_COMPRESS_ZSTD, .level = 1,
		.pages = 1000, .ratio = 0.01, .elapsed_s = 1000 / 62144.0,
	};
	struct kvmstats_migrate_prediction p;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double cpus = ncpu < 1 ? 1 : (double)ncpu, walk = 262144 * 4096 / 1e9;
	double want;

	(void)state;
	multifd4_zstd(&s, in.bandwidth);
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, NULL, 0), 0);
	want = (walk + 1.0) / (cpus < 4 ? cpus : 4);
	assert_true(p.seconds >= want && p.seconds < want + 0.1);
	s.zero_detect = KVMSTATS_MIG_ZERO_LEGACY;
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, NULL, 0), 0);
	want = (walk + 1.0) / (cpus < 5 ? cpus : 5);
	if (want < walk)
		want = walk;
	assert_true(p.seconds >= want && p.seconds < want + 0.1);
	/* The compressor's own CPU time, not the sample's elapsed time
	 * (which adds reading the pages), is the cost. */
	c.cpu_s = c.elapsed_s;
	c.elapsed_s *= 3;
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, NULL, 0), 0);
	assert_true(p.seconds >= want && p.seconds < want + 0.1);
}

/* A VMM pinned to fewer CPUs (libvirt's <emulatorpin>) runs its channels
 * on those alone: with one, the zero test and the compression of every
 * channel add up on it; with eight, four channels get four. */
static void test_source_cpus(void **state)
{
	struct kvmstats_migrate_settings s = {.qemu_major = 10};
	struct kvmstats_migrate_input in = {
		.sz = sizeof(in), .zero_pages = 200000, .nonzero_pages = 62144,
		.nblocks = 1, .block_name_bytes = 6, .bandwidth = 1073741824.0,
		.downtime_s = 0.01, .walk_rate = 1e9, .cpus = 1,
	};
	struct kvmstats_compress_estimate c = {
		.valid = true, .method = KVMSTATS_MIG_COMPRESS_ZSTD, .level = 1,
		.pages = 1000, .ratio = 0.01, .elapsed_s = 1000 / 62144.0,
	};
	struct kvmstats_migrate_prediction p;
	struct kvmstats_migrate_detail d = {0};
	double walk = 262144 * 4096 / 1e9;

	(void)state;
	multifd4_zstd(&s, in.bandwidth);
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, &d, 0), 0);
	assert_true(p.seconds >= walk + 1.0 && p.seconds < walk + 1.1);
	assert_int_equal(d.cpus, 1);
	assert_string_equal(d.cpus_source, "affinity");
	in.cpus = 8;
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, &d, 0), 0);
	assert_true(p.seconds >= (walk + 1.0) / 4 && p.seconds < (walk + 1.0) / 4 + 0.1);
	in.cpus = 0;
	assert_int_equal(ks_migrate_run(&in, &s, &c, &p, &d, 0), 0);
	assert_string_equal(d.cpus_source, "host");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_interval_order),
		cmocka_unit_test(test_uncertain),
		cmocka_unit_test(test_postcopy),
		cmocka_unit_test(test_link),
		cmocka_unit_test(test_legacy_rate),
		cmocka_unit_test(test_auto_converge_limit),
		cmocka_unit_test(test_first_leftover),
		cmocka_unit_test(test_sync_at_threshold),
		cmocka_unit_test(test_threshold_bandwidth),
		cmocka_unit_test(test_multifd_rate),
		cmocka_unit_test(test_multifd_windows),
		cmocka_unit_test(test_throttle_schedule),
		cmocka_unit_test(test_working_set),
		cmocka_unit_test(test_dirtied_at),
		cmocka_unit_test(test_fit_line),
		cmocka_unit_test(test_ranking),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_cpu_work),
		cmocka_unit_test(test_source_cpus),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
