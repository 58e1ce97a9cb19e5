// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The drain scheduler: shares of the link with one and two migrations at
 * a time, own max-bandwidth against the link, the abort of a VM that does
 * not converge, the plan's order against largest-first, the interval,
 * the pace of QEMU's zero test.
 */
#include <math.h>

#include "unit.h"
#include "kvmstats_drain.h"

#define MIB 1048576.0

/* A guest of @mib MiB, @zero_share of it zero, dirtying @rate pages/s
 * (a straight curve, its 95% interval +-@spread of it). */
struct guest {
	struct kvmstats_drain_vm vm;
	struct kvmstats_dirty_point pts[2];
};

static void guest(struct guest *g, pid_t pid, double mib, double zero_share,
		  double rate, double spread, double own_mib)
{
	uint64_t pages = (uint64_t)(mib * 256);

	memset(g, 0, sizeof(*g));
	for (int i = 0; i < 2; i++) {
		double t = i ? 1.0 : 0.5;

		g->pts[i] = (struct kvmstats_dirty_point){
			.t = t, .pages = rate * t, .lo = rate * t * (1 - spread),
			.hi = rate * t * (1 + spread),
		};
	}
	g->vm.pid = pid;
	g->vm.name = "g";
	g->vm.memory_bytes = pages * 4096;
	g->vm.model.zero_pages = (uint64_t)((double)pages * zero_share);
	g->vm.model.nonzero_pages = pages - g->vm.model.zero_pages;
	g->vm.model.nblocks = 1;
	g->vm.model.block_name_bytes = 7;	/* "pc.ram" */
	g->vm.model.curve = rate > 0 ? g->pts : NULL;
	g->vm.model.npoints = rate > 0 ? 2 : 0;
	g->vm.max_bandwidth = own_mib * MIB;
	g->vm.downtime_s = 0.3;
}

static struct kvmstats_drain *drain(struct guest *g, size_t n, double link_mib,
				    uint32_t parallel, enum kvmstats_drain_order order,
				    double abort)
{
	struct kvmstats_drain_opts o = {
		.sz = sizeof(o), .link = link_mib * MIB, .parallel = parallel,
		.order = order, .abort_s_per_gib = abort,
	};
	struct kvmstats_drain *d = kvmstats_drain__new(&g[0].vm, n, sizeof(*g), &o);

	assert_non_null(d);
	return d;
}

/* First pass of a clean guest: what QEMU sends. */
static double clean_bytes(const struct guest *g)
{
	const struct kvmstats_migrate_input *m = &g->vm.model;

	return (double)m->zero_pages * 9 + (double)m->nonzero_pages * 4104 + 1 + 7 + 8 + 8;
}

static const struct kvmstats_drain_slot *by_pid(const struct kvmstats_drain *d, pid_t pid)
{
	for (size_t i = 0; kvmstats_drain__slot(d, i); i++)
		if (kvmstats_drain__slot(d, i)->pid == pid)
			return kvmstats_drain__slot(d, i);
	fail();
	return NULL;
}

static void test_one_alone(void **state)
{
	struct guest g[1];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *s;

	(void)state;
	guest(&g[0], 1, 64, 0.5, 0, 0, 32);
	d = drain(g, 1, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	s = kvmstats_drain__slot(d, 0);
	/* Its own 32 MiB/s is under the link's 48: it limits. */
	assert_int_equal(s->limit, KVMSTATS_DRAIN_BY_OWN);
	assert_true(fabs(s->seconds - clean_bytes(&g[0]) / (32 * MIB)) < 1e-6);
	assert_true(fabs(s->seconds - s->alone.seconds) < 1e-6);
	assert_true(s->converges && !s->aborted);
	assert_true(fabs(kvmstats_drain__result(d)->total_s - s->end_s) < 1e-9);
	kvmstats_drain__free(d);
}

/* Two at once on 48 MiB/s, each allowed 32: 24 each while both run,
 * then the one left gets its own 32. */
static void test_two_share(void **state)
{
	struct guest g[2];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *a, *b;
	double ba, bb, ta;

	(void)state;
	guest(&g[0], 1, 64, 0, 0, 0, 32);
	guest(&g[1], 2, 128, 0, 0, 0, 32);
	d = drain(g, 2, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	a = by_pid(d, 1);
	b = by_pid(d, 2);
	ba = clean_bytes(&g[0]);
	bb = clean_bytes(&g[1]);
	ta = ba / (24 * MIB);
	assert_true(a->start_s == 0 && b->start_s == 0);
	assert_true(fabs(a->end_s - ta) < 1e-6);
	assert_true(fabs(b->end_s - (ta + (bb - ba) / (32 * MIB))) < 1e-6);
	assert_int_equal(a->limit, KVMSTATS_DRAIN_BY_LINK);
	assert_int_equal(b->nsegs, 2);
	assert_true(fabs(b->segs[0].bandwidth - 24 * MIB) < 1);
	assert_int_equal(b->segs[0].by, KVMSTATS_DRAIN_BY_LINK);
	assert_true(fabs(b->segs[1].bandwidth - 32 * MIB) < 1);
	assert_int_equal(b->segs[1].by, KVMSTATS_DRAIN_BY_OWN);
	assert_true(fabs(b->min_share - 24 * MIB) < 1 && fabs(b->max_share - 32 * MIB) < 1);
	kvmstats_drain__free(d);

	/* One at a time: the sum, each at its own limit. */
	d = drain(g, 2, 48, 1, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	assert_true(fabs(kvmstats_drain__result(d)->total_s - (ba + bb) / (32 * MIB)) < 1e-6);
	/* The cheapest first frees capacity first (same total). */
	assert_int_equal(kvmstats_drain__slot(d, 0)->pid, 1);
	assert_int_equal(kvmstats_drain__result(d)->search, KVMSTATS_DRAIN_EXHAUSTIVE);
	kvmstats_drain__free(d);
}

/* A VM held to 8 MiB/s leaves the rest of the link to the other. */
static void test_own_vs_link(void **state)
{
	struct guest g[2];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *slow, *fast;

	(void)state;
	guest(&g[0], 1, 64, 0, 0, 0, 8);
	guest(&g[1], 2, 64, 0, 0, 0, 64);
	d = drain(g, 2, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	slow = by_pid(d, 1);
	fast = by_pid(d, 2);
	assert_true(fabs(slow->segs[0].bandwidth - 8 * MIB) < 1);
	assert_int_equal(slow->segs[0].by, KVMSTATS_DRAIN_BY_OWN);
	assert_true(fabs(fast->segs[0].bandwidth - 40 * MIB) < 1);
	assert_int_equal(fast->segs[0].by, KVMSTATS_DRAIN_BY_LINK);
	assert_true(fabs(fast->end_s - clean_bytes(&g[1]) / (40 * MIB)) < 1e-6);
	kvmstats_drain__free(d);
}

/* 64 MiB/s of dirtying against 32 MiB/s: aborted after 150 s/GiB. */
static void test_abort(void **state)
{
	struct guest g[2];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *s;
	const struct kvmstats_drain_result *r;

	(void)state;
	guest(&g[0], 1, 256, 0.5, 64 * 256, 0.1, 32);
	guest(&g[1], 2, 64, 0.5, 0, 0, 32);
	d = drain(g, 2, 48, 1, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	s = by_pid(d, 1);
	r = kvmstats_drain__result(d);
	assert_true(s->aborted && !s->converges && !s->alone.converges);
	assert_true(fabs(s->seconds - 150 * 0.25) < 1e-6);
	assert_true(fabs(s->abort_after_s - 37.5) < 1e-9);
	assert_int_equal(r->not_converging, 1);
	/* The one that converges goes first: it is gone 37.5 s earlier. */
	assert_int_equal(kvmstats_drain__slot(d, 0)->pid, 2);
	/* 2 GiB/s of downtime budget is not needed: a quieter guest is. */
	assert_true(s->quiet_dirty_bps > 0 && s->quiet_dirty_bps < s->dirty_bps);
	assert_true(s->downtime_needed_s > 0.3);
	kvmstats_drain__free(d);

	/* Never aborted: the drain never ends, and says so (no number). */
	d = drain(g, 2, 48, 1, KVMSTATS_DRAIN_ORDER_LARGEST_FIRST, -1);
	r = kvmstats_drain__result(d);
	assert_false(isfinite(r->total_s));
	assert_false(isfinite(by_pid(d, 1)->end_s));
	assert_false(by_pid(d, 1)->converges || by_pid(d, 1)->aborted);
	assert_true(by_pid(d, 1)->abort_after_s < 0);
	kvmstats_drain__free(d);

	/* Configurable: 40 s per GiB. */
	d = drain(g, 2, 48, 1, KVMSTATS_DRAIN_ORDER_PLAN, 40);
	assert_true(fabs(by_pid(d, 1)->seconds - 10) < 1e-6);
	kvmstats_drain__free(d);
}

/* Converges alone at 48 MiB/s, not at 32 while another runs: it waits
 * for the other to leave, then converges. */
static void test_share_stalls(void **state)
{
	struct guest g[2];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *busy, *quiet;

	(void)state;
	/* 34 MiB/s of dirtying: under its own 48, over a share of 32. */
	guest(&g[0], 1, 64, 0.5, 34 * 256, 0, 48);
	guest(&g[1], 2, 128, 0, 0, 0, 48);
	d = drain(g, 2, 64, 2, KVMSTATS_DRAIN_ORDER_SMALLEST_FIRST, 0);
	busy = by_pid(d, 1);
	quiet = by_pid(d, 2);
	assert_true(busy->alone.converges);
	assert_true(busy->converges);
	assert_true(busy->end_s > quiet->end_s);
	assert_true(fabs(busy->segs[0].bandwidth - 32 * MIB) < 1);
	assert_true(fabs(busy->segs[busy->nsegs - 1].bandwidth - 48 * MIB) < 1);
	kvmstats_drain__free(d);
}

/* Random drains: the plan's order is never longer than largest-first's
 * or smallest-first's, and lo <= total <= hi. */
static void test_orders_and_interval(void **state)
{
	struct guest g[6];
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (int round = 0; round < 20; round++) {
		struct kvmstats_drain *p, *lf, *sf;
		const struct kvmstats_drain_result *rp;
		uint32_t par = 1 + (uint32_t)(round % 3);

		for (int i = 0; i < 6; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			guest(&g[i], i + 1, 32 + (double)(x % 224), (double)(x % 90) / 100,
			      (double)((x >> 8) % 40) * 256, 0.2, 16 + (double)((x >> 16) % 48));
		}
		p = drain(g, 6, 48, par, KVMSTATS_DRAIN_ORDER_PLAN, 0);
		lf = drain(g, 6, 48, par, KVMSTATS_DRAIN_ORDER_LARGEST_FIRST, 0);
		sf = drain(g, 6, 48, par, KVMSTATS_DRAIN_ORDER_SMALLEST_FIRST, 0);
		rp = kvmstats_drain__result(p);
		assert_true(rp->total_s <= kvmstats_drain__result(lf)->total_s + 1e-3);
		assert_true(rp->total_s <= kvmstats_drain__result(sf)->total_s + 1e-3);
		assert_true(rp->total_lo_s <= rp->total_s && rp->total_s <= rp->total_hi_s);
		assert_int_equal(rp->orders_tried, 720);
		/* Largest-first is by memory. */
		for (size_t i = 1; i < 6; i++)
			assert_true(g[kvmstats_drain__slot(lf, i - 1)->index].vm.memory_bytes >=
				    g[kvmstats_drain__slot(lf, i)->index].vm.memory_bytes);
		for (size_t i = 0; i < 6; i++) {
			const struct kvmstats_drain_slot *s = kvmstats_drain__slot(p, i);

			assert_true(s->end_lo_s <= s->end_s && s->end_s <= s->end_hi_s);
			assert_true(s->end_s <= rp->total_s + 1e-9);
		}
		kvmstats_drain__free(p);
		kvmstats_drain__free(lf);
		kvmstats_drain__free(sf);
	}
}

/* A dirty guest alone at a constant bandwidth: the pass-by-pass schedule
 * and the per-VM model agree; the dirty curve's spread is an interval. */
static void test_agrees_with_model(void **state)
{
	struct guest g[1];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *s;
	const struct kvmstats_drain_result *r;

	(void)state;
	guest(&g[0], 1, 128, 0.3, 8 * 256, 0.5, 32);
	d = drain(g, 1, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	s = kvmstats_drain__slot(d, 0);
	r = kvmstats_drain__result(d);
	assert_true(s->converges && s->alone.converges);
	assert_true(fabs(s->seconds - s->alone.seconds) < 1e-6 * s->alone.seconds);
	assert_int_equal(s->passes, s->alone.passes);
	assert_true(fabs((double)s->bytes - (double)s->alone.bytes) < 16);
	assert_true(r->total_lo_s < r->total_s && r->total_s < r->total_hi_s);
	kvmstats_drain__free(d);
}

/* A mostly-zero 1 GiB guest whose pages QEMU tests at 256 MiB/s: its
 * first pass is paced by that test, not by its bandwidth, alone as in the
 * per-VM model; beside it the other VM gets the rest of the link. */
static void test_walk_paces(void **state)
{
	struct guest g[2];
	struct kvmstats_drain *d;
	const struct kvmstats_drain_slot *zero, *full;
	double pace;

	(void)state;
	guest(&g[0], 1, 1024, 0.98, 0, 0, 32);
	g[0].vm.model.walk_rate = 256 * MIB;
	guest(&g[1], 2, 64, 0, 0, 0, 64);
	d = drain(g, 1, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	zero = kvmstats_drain__slot(d, 0);
	assert_int_equal(zero->limit, KVMSTATS_DRAIN_BY_WALK);
	assert_true(zero->seconds > 3.9 && zero->seconds < 4.1);
	assert_true(fabs(zero->seconds - zero->alone.seconds) < 1e-3 * zero->alone.seconds);
	kvmstats_drain__free(d);

	d = drain(g, 2, 48, 2, KVMSTATS_DRAIN_ORDER_PLAN, 0);
	zero = by_pid(d, 1);
	full = by_pid(d, 2);
	pace = clean_bytes(&g[0]) / 4.0;
	assert_int_equal(zero->segs[0].by, KVMSTATS_DRAIN_BY_WALK);
	assert_true(fabs(zero->segs[0].bandwidth - pace) < 1e-3 * pace);
	assert_int_equal(full->segs[0].by, KVMSTATS_DRAIN_BY_LINK);
	assert_true(fabs(full->segs[0].bandwidth - (48 * MIB - pace)) < 1e-3 * pace);
	assert_true(fabs(full->end_s - clean_bytes(&g[1]) / (48 * MIB - pace)) < 1e-3);
	assert_true(fabs(zero->end_s - zero->alone.seconds) < 1e-3 * zero->alone.seconds);
	kvmstats_drain__free(d);
}

static void test_bad_input(void **state)
{
	struct guest g[1];
	struct kvmstats_drain_opts o = { .sz = sizeof(o), .link = 0 };

	(void)state;
	guest(&g[0], 1, 64, 0, 0, 0, 32);
	assert_null(kvmstats_drain__new(&g[0].vm, 1, sizeof(g[0]), &o));
	assert_int_equal(errno, EINVAL);
	o.link = MIB;
	g[0].vm.max_bandwidth = 0;
	assert_null(kvmstats_drain__new(&g[0].vm, 1, sizeof(g[0]), &o));
	assert_null(kvmstats_drain__new(&g[0].vm, 0, sizeof(g[0]), &o));
	assert_int_equal(kvmstats_drain_order_parse("largest-first"),
			 KVMSTATS_DRAIN_ORDER_LARGEST_FIRST);
	assert_int_equal(kvmstats_drain_order_parse("biggest"), -EINVAL);
	assert_string_equal(kvmstats_drain_limit_str(KVMSTATS_DRAIN_BY_LINK), "link");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_alone),
		cmocka_unit_test(test_two_share),
		cmocka_unit_test(test_own_vs_link),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_share_stalls),
		cmocka_unit_test(test_orders_and_interval),
		cmocka_unit_test(test_agrees_with_model),
		cmocka_unit_test(test_walk_paces),
		cmocka_unit_test(test_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
