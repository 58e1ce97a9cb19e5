/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the two users of libvirt (source_libvirt.c, migrate_libvirt.c)
 * share; with libvirt only.
 */
#ifndef KVMSTATS_LIBVIRT_INT_H
#define KVMSTATS_LIBVIRT_INT_H

#include <stdbool.h>

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

#endif
