// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Multifd: what its channels send and how fast, per QEMU version.
 *
 * Facts from QEMU's migration/multifd*.c, ram.c and migration-stats.c
 * (read for facts only), and measured against real migrations on
 * loopback TCP (tests/integration/plan_migrate.sh, docs/plan.md):
 *  - pages travel in packets of up to 128 (MULTIFD_PACKET_SIZE 512 KiB
 *    of 4 KiB pages); a packet is a fixed header (magic, version, flags,
 *    counts, packet number, the RAM block's name in 256 bytes) and an
 *    array of 128 page offsets whatever its fill: 320 + 8 x 128 = 1344
 *    bytes, then the pages (4096 bytes each, or their compressed stream);
 *  - QEMU before 9.0 (and 9.0+ with zero-page-detection=legacy) tests
 *    pages for zero in the migration thread and sends a zero page on the
 *    main channel (9 bytes) as the legacy path does; 9.0+ by default lets
 *    the channels test them, and a zero page is then only an offset in
 *    a packet;
 *  - QEMU 7.2 counts a packet's pages at 4096 bytes each, compressed or
 *    not, both in ram.transferred and against max-bandwidth (its
 *    multifd_send_pages() accounts before compression): compression
 *    there saves wire bytes but neither reported bytes nor time under a
 *    bandwidth limit. It counts a packet when the migration thread hands
 *    it to a channel, so the one being filled is over the limit: measured
 *    1.10x the limit at 32 MiB/s (one 512 KiB packet per 100 ms: 1.16x);
 *  - QEMU 8.x+ counts what a channel actually sent (after compression)
 *    once it sent it, and checks max-bandwidth against the bytes counted
 *    so far in the window (100 ms): a window sends whole packets until
 *    the counted ones exceed its budget, plus those handed to channels
 *    and not yet counted then, 0 to one per channel. Which, varies from
 *    window to window: traced on QEMU 10.0 at 32 MiB/s with 4 channels
 *    (`-trace migrate_transferred`; 34 windows, quiet and busy guests),
 *    7 to 11 packets of the budget's 6.4, each count seen (7: 9 times,
 *    8: 4, 9: 6, 10: 3, 11: 12), 9.1 on average (1.43x the limit), and
 *    with an idle guest mostly 11: see ks_multifd_inflight_range(). A
 *    window's count is drawn (ks_multifd_window()). Earlier runs
 *    measured 1.31x with 2 channels, 1.58x with 8: the channels past 4
 *    add none;
 *  - QEMU 8.x+ counts device state in ram.transferred too: ~125 KB for
 *    our test VM (one vCPU, no devices), taken as the usual case.
 * QEMU 8.x and 9.x were not measured: they are modelled as 10.0.
 */
#include <math.h>

#include "mem_internal.h"

#define MULTIFD_PAGES 128.0
#define MULTIFD_PACKET_BYTES (320.0 + 8.0 * MULTIFD_PAGES)
#define MULTIFD_FULL_PACKET                                                    \
	(MULTIFD_PACKET_BYTES + MULTIFD_PAGES * KVMSTATS_PAGE_SIZE)
#define MULTIFD_INFLIGHT_MAX 4u

static bool counts_wire(const struct kvmstats_migrate_settings *s)
{
	return s->qemu_major >= 8;
}

static bool zero_in_channels(const struct kvmstats_migrate_settings *s)
{
	return s->qemu_major >= 9 &&
	       s->zero_detect == KVMSTATS_MIG_ZERO_MULTIFD;
}

bool ks_multifd_tests_zero(const struct kvmstats_migrate_settings *s)
{
	return s->multifd && s->channels && zero_in_channels(s);
}

unsigned int ks_multifd_zero_testers(const struct kvmstats_migrate_settings *s)
{
	if (s->qemu_major >= 9 && s->zero_detect == KVMSTATS_MIG_ZERO_NONE)
		return 0;
	return ks_multifd_tests_zero(s) ? s->channels : 1;
}

double ks_migrate_fixed_bytes(const struct kvmstats_migrate_settings *s)
{
	return counts_wire(s) ? KS_MIG_DEVICE_STATE_BYTES : 0;
}

/* Bytes of one pass: @reported as QEMU counts them (ram.transferred, and
 * against max-bandwidth), @wire as they go over the wire. */
void ks_multifd_pass(const struct kvmstats_migrate_settings *s,
		     const struct kvmstats_compress_estimate *c,
		     const struct ks_mig_pages *pg, double *reported,
		     double *wire)
{
	bool zc = zero_in_channels(s);
	double in_packets = pg->normal + (zc ? pg->zero : 0);
	double packets = ceil(in_packets / MULTIFD_PAGES);
	double main_ch = zc ? 0 : pg->zero * KVMSTATS_QEMU_ZERO_PAGE_BYTES;
	double raw = pg->normal * KVMSTATS_PAGE_SIZE;
	double comp = c && c->valid ? raw * c->ratio : raw;

	if (s->zero_detect == KVMSTATS_MIG_ZERO_NONE) {
		/* Zero pages are sent as normal ones. */
		packets = ceil((pg->normal + pg->zero) / MULTIFD_PAGES);
		raw += pg->zero * KVMSTATS_PAGE_SIZE;
		comp = c && c->valid ? raw * c->ratio : raw;
		main_ch = 0;
	}
	*wire = main_ch + packets * MULTIFD_PACKET_BYTES + comp +
		KVMSTATS_QEMU_EOS_BYTES;
	*reported = counts_wire(s) ? *wire
				   : main_ch + packets * MULTIFD_PACKET_BYTES +
					     raw + KVMSTATS_QEMU_EOS_BYTES;
}

/* Packets that may be in flight, uncounted, when a window's budget is
 * crossed: one per channel, up to 4, from 8.x on; 7.2 counts a packet as
 * it hands it over, so its windows do not vary (0). */
unsigned int ks_multifd_inflight(const struct kvmstats_migrate_settings *s)
{
	if (!counts_wire(s))
		return 0;
	return s->channels < MULTIFD_INFLIGHT_MAX ? s->channels
						  : MULTIFD_INFLIGHT_MAX;
}

/* How many are in flight, @lo to @hi, on @cpus CPUs of which the guest's
 * vCPUs keep @busy busy. With CPUs of their own, the migration thread
 * runs ahead of its channels and all are: traced on QEMU 10.0 at 32
 * MiB/s with an idle guest, 11 packets in most windows; 1.65x the limit
 * with the VMM on one CPU. Where busy vCPUs take CPUs the migration
 * thread and its channels need, preemption spreads them from none to
 * all: 7 to 11 packets, each count seen, 1.41x on average, with a guest
 * keeping one of two CPUs busy. */
void ks_multifd_inflight_range(const struct kvmstats_migrate_settings *s,
			       double cpus, double busy, unsigned int *lo,
			       unsigned int *hi)
{
	unsigned int n = ks_multifd_inflight(s);

	*hi = n;
	*lo = busy >= 0.5 && cpus - busy < 1.0 + s->channels ? 0 : n;
}

/* Bytes a rate-limit window sends at @bw with @k packets in flight when
 * its budget is crossed (8.x+): whole packets until the counted ones
 * exceed the budget, then the @k. 7.2: the budget and the packet in hand. */
double ks_multifd_window(const struct kvmstats_migrate_settings *s, double bw,
			 unsigned int k)
{
	double budget = bw * KS_MIG_WINDOW_S;

	if (!counts_wire(s))
		return budget + MULTIFD_PAGES * KVMSTATS_PAGE_SIZE;
	return (floor(budget / MULTIFD_FULL_PACKET) + 1 + k) *
	       MULTIFD_FULL_PACKET;
}

/* The rate the transfer runs at under max-bandwidth @bw: its windows'
 * mean, each count of packets in flight from @lo to @hi as likely. */
double ks_multifd_bandwidth(const struct kvmstats_migrate_settings *s,
			    double bw, unsigned int lo, unsigned int hi)
{
	return (ks_multifd_window(s, bw, lo) + ks_multifd_window(s, bw, hi)) /
	       2 / KS_MIG_WINDOW_S;
}
