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
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ks_qmp;

enum ks_qmp_flags {
	/* Look for another client before connecting (an open, or a monitor
	 * found busy at the last try): a busy monitor then costs no
	 * connection at all. Without it the look is taken only when QEMU
	 * is slow to greet us. */
	KS_QMP_CHECK_FIRST = 1u << 0,
	/* Send qmp_capabilities with the first batch instead of on its
	 * own: one round trip less for a short exchange. */
	KS_QMP_LAZY_CAPS = 1u << 1,
};

/* Connect to the QMP socket @path (when @pid > 0, a path as @pid sees it:
 * relative to its working directory, in its mount namespace), read the
 * greeting and run qmp_capabilities (see KS_QMP_LAZY_CAPS). Every wait
 * also ends when @cancel_fd (-1: none) turns readable, then and in later
 * calls with -ECANCELED. Errors: -ENOENT/-ENOTSOCK (no socket there), -EBUSY
 * (another client holds the monitor: QEMU serves one at a time),
 * -ETIMEDOUT (no answer before @deadline, or a monitor that accepts no
 * connection), -ECONNREFUSED, -EPROTO (not QMP); @err gets one line. */
int ks_qmp_connect(struct ks_qmp **out, const char *path, pid_t pid,
		   int cancel_fd, unsigned int flags, uint64_t deadline_ns,
		   char *err, size_t errsz);

struct stat;

/* An O_PATH fd on the QMP socket @path, to connect through. @pid > 0: a
 * path that process named (its command line), resolved in its root and
 * working directory, and taken only if that process could use it itself
 * or listens on it (qmp_trust.c); @pid <= 0: a path the user gave. *st
 * gets the socket file's stat. -errno with one line in @err: -ENOENT,
 * -ENOTSOCK, -EACCES (refused, and why), ... */
int ks_qmp_sock_open(const char *path, pid_t pid, struct stat *st,
		     char *err, size_t errsz);
/* ks_qmp_connect() through an fd of ks_qmp_sock_open() (kept by the
 * caller), @label naming the socket in messages. */
int ks_qmp_connect_fd(struct ks_qmp **out, int pathfd, const struct stat *st,
		      const char *label, pid_t pid, int cancel_fd,
		      unsigned int flags, uint64_t deadline_ns, char *err,
		      size_t errsz);
/* Refuse (-EMSGSIZE) messages bigger than @bytes (at most 64 MiB, the
 * default): what an answer may take is the caller's to know. */
void ks_qmp_set_max_msg(struct ks_qmp *q, size_t bytes);
/* Refuse (-EMSGSIZE) a message that would cost json-c more than @bytes
 * of memory, estimated from its elements before it is parsed: at most
 * 64 MiB; 8 MiB until set, and ks_qmp_set_max_msg() sets sixteen times
 * its bytes. A message nesting deeper than 16 is refused too. */
void ks_qmp_set_max_cost(struct ks_qmp *q, size_t bytes);
/* The tokener the client parses a monitor's stream with: strict JSON,
 * nested at most 16 deep. */
struct json_tokener *ks_qmp_tokener(void);
/* What the client estimates json-c builds for a message of the @n bytes
 * at @s (the estimate ks_qmp_set_max_cost() bounds; of several, the
 * costliest), in *cost: 0, or -EMSGSIZE when it would refuse it (past
 * @max_cost, or nested too deep). For the fuzzer, which holds it to what
 * json-c takes. */
int ks_qmp_estimate(const char *s, size_t n, size_t max_cost, size_t *cost);
/* QEMU's version from the greeting ("10.0.2"); "" when it gave none. */
const char *ks_qmp_version(const struct ks_qmp *q);

/* What sock_diag says of the unix socket of inode @ino. */
struct ks_unix_diag {
	unsigned int state;	/* TCP_* numbers: 10 listening, 1 connected */
	bool has_peer;
	uint32_t peer;		/* the peer's inode; 0 while still queued */
	bool has_vfs;
	uint32_t vfs_ino;	/* the file it is bound to */
	uint32_t vfs_dev;	/* as the kernel encodes a dev_t */
};
/* 0, or -errno (-EPROTO: no such socket, or no unix sock_diag). */
int ks_unix_diag(uint32_t ino, struct ks_unix_diag *out);

/* One command of a batch. */
struct ks_qmp_cmd {
	const char *cmd;
	struct json_object *args;	/* NULL or an object; the caller's */
	struct json_object *ret;	/* out: "return" (the caller puts it) */
};

/* Send @n commands at once, then read their replies in order: one round
 * trip for all (QEMU runs them one after the other). The first error is
 * returned; the commands before it have their ret. -EREMOTEIO when QEMU
 * answered with an error (its text in @err); after any other error the
 * connection must be closed. */
int ks_qmp_batch(struct ks_qmp *q, struct ks_qmp_cmd *cmds, size_t n,
		 uint64_t deadline_ns, char *err, size_t errsz);
/* Run @cmd with @args (NULL or an object; the caller keeps its
 * reference). *ret (may be NULL) gets the "return" value, which the
 * caller puts. Errors as ks_qmp_batch(). */
int ks_qmp_call(struct ks_qmp *q, const char *cmd, struct json_object *args,
		uint64_t deadline_ns, struct json_object **ret, char *err,
		size_t errsz);
void ks_qmp_close(struct ks_qmp *q);

/* Deadline @ms from now. */
uint64_t ks_qmp_deadline(unsigned int ms);

#endif
