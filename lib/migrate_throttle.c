// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Auto-converge, as QEMU's migration_trigger_throttle() and
 * mig_throttle_guest_down() do it (7.2 to 10.0, read for facts only): at
 * a dirty-bitmap sync at least a second after the previous period began,
 * if the bytes dirtied in the period exceed throttle-trigger-threshold
 * (50%) of the bytes sent in it for the second time, the throttle starts
 * at cpu-throttle-initial or grows by cpu-throttle-increment, up to
 * max-cpu-throttle (99% by default). With cpu-throttle-tailslow the
 * growth is at most what would bring the dirtied bytes down to the
 * threshold: the CPU share times threshold / dirtied (in whole percents),
 * up to the increment.
 * A throttled vCPU runs (100 - throttle)% of the time, so the guest's own
 * time, on which its dirty curve is measured, advances that much slower.
 */
#include "mem_internal.h"

unsigned int ks_throttle_max(const struct kvmstats_migrate_settings *s)
{
	return s && s->throttle_max && s->throttle_max <= 99 ? s->throttle_max : 99;
}

/* The throttle after one more period over the threshold. */
static unsigned int throttle_up(const struct ks_throttle *th,
				const struct kvmstats_migrate_settings *s,
				double limit)
{
	unsigned int cpu = 100 - th->pct, ideal, inc = s->throttle_increment;

	if (!th->pct)
		return s->throttle_initial;
	if (s->throttle_tailslow && th->period_dirty > 0) {
		ideal = (unsigned int)(cpu * (limit / th->period_dirty));
		if (cpu - ideal < inc)
			inc = cpu - ideal;
	}
	return th->pct + inc;
}

void ks_throttle_sync(struct ks_throttle *th, const struct kvmstats_migrate_settings *s,
		      double now, double sent, double dirtied_pages)
{
	unsigned int trigger = s && s->throttle_trigger ? s->throttle_trigger : 50;
	double limit;

	th->period_sent += sent;
	th->period_dirty += dirtied_pages * KS_PAGE;
	if (!th->on || now - th->period_t < 1.0)
		return;
	limit = th->period_sent * trigger / 100.0;
	if (th->period_dirty > limit && ++th->high >= 2) {
		th->high = 0;
		th->pct = throttle_up(th, s, limit);
		if (th->pct > ks_throttle_max(s))
			th->pct = ks_throttle_max(s);
		if (th->pct > th->max)
			th->max = th->pct;
	}
	th->period_t = now;
	th->period_sent = th->period_dirty = 0;
}
