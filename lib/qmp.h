/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A small QMP client (QEMU Machine Protocol): connect to a monitor socket,
 * enter command mode, run commands. Every call takes an absolute deadline
 * (CLOCK_MONOTONIC ns): a busy or hung monitor costs at most the time
 * left, never more. Internal to libkvmstats.
 */
#ifndef KVMSTATS_QMP_H
#define KVMSTATS_QMP_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ks_qmp;

/* Connect to the QMP socket @path (when @pid > 0, a path as @pid sees it:
 * relative to its working directory, in its mount namespace), read the
 * greeting and run qmp_capabilities. Every wait also ends when
 * @cancel_fd (-1: none) turns readable, then and in later calls with
 * -ECANCELED. Errors: -ENOENT/-ENOTSOCK (no socket there), -EBUSY
 * (another client holds the monitor: QEMU serves one at a time),
 * -ETIMEDOUT (no answer before @deadline_ns), -ECONNREFUSED, -EPROTO (not
 * QMP); @err gets one line. */
int ks_qmp_connect(struct ks_qmp **out, const char *path, pid_t pid,
		   int cancel_fd, uint64_t deadline_ns, char *err, size_t errsz);
/* Run @cmd with @args (NULL or an object; the caller keeps its
 * reference). *ret (may be NULL) gets the "return" value, which the
 * caller puts. -EREMOTEIO when QEMU answered with an error (its text in
 * @err); after -ETIMEDOUT the connection must be closed. */
int ks_qmp_call(struct ks_qmp *q, const char *cmd, struct json_object *args,
		uint64_t deadline_ns, struct json_object **ret, char *err,
		size_t errsz);
void ks_qmp_close(struct ks_qmp *q);

/* Deadline @ms from now. */
uint64_t ks_qmp_deadline(unsigned int ms);

#endif
