/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the users of libvirt (source_libvirt.c, migrate_libvirt.c,
 * follow_libvirt.c) share; with libvirt only.
 */
#ifndef KVMSTATS_LIBVIRT_INT_H
#define KVMSTATS_LIBVIRT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#define KS_LIBVIRT_DEFAULT_URI "qemu:///system"

/* libvirt's default handler prints to stderr; a library never prints:
 * set on every connection. */
void ks_libvirt_quiet(void *arg, virErrorPtr err);
/* The message of this thread's last libvirt error. */
const char *ks_libvirt_error(void);
/* Whether @uri has a daemon to ask: any URI but the default is the
 * caller's word; for qemu:///system, its socket (@rw: the read-write
 * one) exists, so a QEMU given a -uuid by hand on a host without
 * libvirt costs no connection attempt. */
bool ks_libvirt_daemon_here(const char *uri, bool rw);

/* A question about one domain, asked on a thread of its own
 * (migrate_libvirt.c): a daemon that stops answering costs the caller its
 * timeout, and the thread ends when libvirt answers, holding nothing of
 * the caller's. */
enum ks_lv_find {
	KS_LV_RUNNING,	/* the pid must be libvirt's running instance */
	KS_LV_SEEN,	/* it was: the domain by UUID, unless another
			 * instance of it runs now */
};
/* On the thread, with the domain: fills @res (the question's own
 * res_sz bytes, zeroed) and @why; 0 or -errno. */
typedef int (*ks_lv_work_fn)(virDomainPtr dom, void *res, char *why,
			     size_t len);
struct ks_lv_question {
	const char *uri;	/* NULL: qemu:///system */
	pid_t pid;
	const char *uuid;	/* ks_libvirt_cmdline()'s, for @pid */
	long dom_id;
	enum ks_lv_find how;
	ks_lv_work_fn work;
	size_t res_sz;
	unsigned int timeout_ms;	/* 0: 1000 */
};
struct kvmstats_libvirt_guard;
/* Ask and wait at most the timeout; *@res (res_sz bytes) gets the answer
 * when one came in time. -ENOENT (no daemon here, or not libvirt's
 * domain), -ETIMEDOUT (then @g, when not NULL, keeps the question:
 * -EBUSY at once until it is answered), or the work's -errno; @why says
 * why (may be set on success too). */
int ks_libvirt_ask(const struct ks_lv_question *qn,
		   struct kvmstats_libvirt_guard *g, void *res, char *why,
		   size_t len);

#endif
