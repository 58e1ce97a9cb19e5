// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Post-copy: with the postcopy-ram capability on, the migration runs
 * pre-copy until it is told to switch (migrate-start-postcopy; libvirt's
 * virsh migrate --postcopy-after-precopy asks once the first pass is
 * done), then the destination runs the guest and pulls what is missing.
 * Modelled as that switch after the first pass: the one moment the
 * planner can name. Facts from QEMU's migration/migration.c
 * (postcopy_start), ram.c and savevm.c, 7.2 to 10.0, read for facts only:
 *  - postcopy_start() stops the VM, syncs the dirty bitmap a last time
 *    and tells the destination which pages to discard: the ones dirtied
 *    since they were sent, as ranges (a be64 start and a be64 length
 *    each, up to 12 per MIG_CMD_POSTCOPY_RAM_DISCARD command); then the
 *    device state in one package; then the destination's vCPUs start.
 *    That is the downtime;
 *  - from then on ram_save_iterate() sends the pages still dirty
 *    (normal pages: header and 4096 bytes), those the destination
 *    faulted on first (its requests come back on the return path). The
 *    guest's writes land on the destination, so its dirty rate no
 *    longer matters: post-copy always completes;
 *  - the phase's rate limit is max-postcopy-bandwidth, 0 (the default)
 *    meaning unlimited; the switch itself ran at it in older releases
 *    and runs unlimited in recent ones (10.0 is modelled so). The
 *    network's speed is not known here: what runs unlimited is modelled
 *    at max-bandwidth, and said so.
 */
#include "mem_internal.h"

/* A discard range: start and length, be64 each; scattered dirty pages
 * (the worst case) are a range each. Commands add a few bytes per 12. */
#define DISCARD_RANGE_BYTES 16.0
#define DISCARD_PER_CMD 12.0
#define DISCARD_CMD_BYTES 16.0

double ks_postcopy_bandwidth(const struct kvmstats_migrate_settings *s, double bw)
{
	return s && s->postcopy_bw > 0 ? s->postcopy_bw : bw;
}

void ks_postcopy_switch(const struct kvmstats_migrate_settings *s, double bw,
			double dirty_pages, struct ks_postcopy *pc)
{
	double pbw = ks_postcopy_bandwidth(s, bw);
	double discard = dirty_pages * DISCARD_RANGE_BYTES +
			 (dirty_pages / DISCARD_PER_CMD + 1) * DISCARD_CMD_BYTES;

	pc->switch_bytes = discard + KS_MIG_DEVICE_STATE_BYTES;
	pc->downtime_s = pc->switch_bytes / (s && s->qemu_major >= 10 ? bw : pbw);
	pc->bytes = dirty_pages * KVMSTATS_QEMU_NORMAL_PAGE_BYTES +
		    KVMSTATS_QEMU_EOS_BYTES;
	pc->bw = pbw;
	pc->seconds = pc->bytes / pbw;
}
