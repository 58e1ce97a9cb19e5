/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A libvirt domain's migration as libvirt's job info tells it
 * (follow_libvirt.c), for migrate_follow.c: libvirtd holds such a VMM's
 * monitor for good, so query-migrate is libvirt's to ask.
 */
#ifndef KVMSTATS_FOLLOW_LIBVIRT_H
#define KVMSTATS_FOLLOW_LIBVIRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvmstats_libvirt_guard;
struct kvmstats_migration;
struct ks_follow_lv;

/* Follow @pid through libvirt when libvirt started it (its command line
 * says so, and the daemon's socket is here); nothing is asked yet.
 * -ENOENT: not libvirt's (or built without libvirt): follow it over QMP.
 * @g NULL: a guard of its own. */
int ks_follow_lv_open(struct ks_follow_lv **out, pid_t pid, const char *uri,
		      unsigned int timeout_ms,
		      struct kvmstats_libvirt_guard *g);
/* One reading into *@m; @gone: the VMM exited (libvirt stops a migrated
 * domain's QEMU: its completed job is then read once). 0 or
 * kvmstats_follow__poll()'s -errno. */
int ks_follow_lv_poll(struct ks_follow_lv *l, bool gone,
		      struct kvmstats_migration *m, char *err, size_t errsz);
void ks_follow_lv_free(struct ks_follow_lv *l);

/* Where QEMU's migration began in a libvirt job (kvmstats_follow.h): the
 * job time of its last poll with no byte sent and of its first with. */
struct ks_lv_lead {
	uint64_t zero_ms, lead_ms;
	bool zero_seen, lead_known;
};

/* Takes reading *@m (job_time_ms filled) into @s and derives its
 * total_time_ms when QEMU's start is known. */
void ks_follow_lv_lead(struct ks_lv_lead *s, struct kvmstats_migration *m);

#ifdef HAVE_LIBVIRT
#include <libvirt/libvirt.h>
/* A migration-out job's typed parameters as a reading; @type: libvirt's
 * job type (a completed job's with the COMPLETED flag). */
void ks_follow_lv_take(struct kvmstats_migration *m, int type,
		       virTypedParameterPtr p, int n);
#endif

#endif
