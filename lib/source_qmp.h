/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The qmp source's parts, shared between its files (internal):
 * qmp_cmdline.c finds the monitor on QEMU's command line, qmp_schema.c
 * turns QMP's stats into schemas and snapshots, qmp_order.c knows the
 * order QEMU lists histogram buckets in, source_qmp.c polls and reads.
 */
#ifndef KVMSTATS_SOURCE_QMP_H
#define KVMSTATS_SOURCE_QMP_H

#include <limits.h>

#include "internal.h"
#include "qmp.h"

/* ---- the command line (qmp_cmdline.c) ---- */

#define KS_QMP_MAX_SOCKS 8

enum ks_qmp_find_flags {
	/* Also monitors on a socket passed as an fd (-chardev
	 * socket,fd=N: libvirt's), by the file it is bound to. */
	KS_QMP_FIND_FD = 1u << 0,
};

/* The QMP sockets QEMU @pid listens on, as its command line names them
 * (-qmp unix:PATH,server=on, -chardev socket,path=PATH,server=on with
 * -mon chardev=ID,mode=control), in that order. Returns how many, or
 * -ENOTSUP (not QEMU), or -errno. Names only: see ks_qmp_sock_open(). */
int ks_qmp_find_sockets(pid_t pid, unsigned int flags, char (*out)[PATH_MAX],
			int max);
/* The same on a command line of @len bytes at @buf (NUL-separated, as
 * /proc/PID/cmdline), without KS_QMP_FIND_FD: for the fuzzer. */
int ks_qmp_cmdline_sockets(const char *buf, size_t len, char (*out)[PATH_MAX],
			   int max);

/* ---- schemas and snapshots (qmp_schema.c) ---- */

/* The latest values of one target, laid out by its schema. */
struct snap {
	uint64_t *data;
	uint64_t *missing;	/* one bit per stat */
};

const char *ks_json_str(struct json_object *o, const char *key);
/* The "stats" list of the kvm provider in a query-stats or
 * query-stats-schemas result for @target (NULL: any target; @qom_path
 * gets the entry's qom-path). @i is where to start in @results. */
struct json_object *ks_qmp_provider_stats(struct json_object *results,
					  const char *target, size_t *i,
					  const char **qom_path);
/* A schema for QEMU's descriptors @list, histograms sized by a first
 * query-stats @values; this kernel's own schema when they match it. */
struct kvmstats_schema *ks_qmp_schema(struct kvmstats_ctx *ctx,
				      struct json_object *list,
				      struct json_object *values,
				      const char *id, bool vcpu, char *err,
				      size_t errsz);
/* What json-c may take for one target's query-stats result, as QEMU's
 * descriptors @list allow (its histograms counted at the most kept). */
size_t ks_qmp_cost_of_list(struct json_object *list);
int ks_snap_alloc(struct snap *s, const struct kvmstats_schema *sc);
void ks_snap_free(struct snap *s);
/* A query-stats "stats" list into @s; multi-value stats are read last
 * element first when @reversed. A stat QEMU did not return stays
 * marked missing. Memory work only. */
void ks_snap_fill(struct snap *s, const struct kvmstats_schema *sc,
		  struct json_object *values, bool reversed);

/* ---- the vCPUs a monitor reports (qmp_cpus.c) ---- */

/* More vCPUs than KVM lets one VM have on any architecture (x86's
 * KVM_MAX_VCPUS is at most 4096), and KVM's bound on their ids. */
#define KS_QMP_MAX_VCPUS 4096
#define KS_QMP_MAX_VCPU_ID (4 * KS_QMP_MAX_VCPUS)

struct qmp_cpu {
	char *qom_path;
	int index;		/* QEMU's cpu-index */
	pid_t tid;		/* its thread, which created the KVM vCPU */
	bool present;		/* in the last snapshot */
	bool held;		/* a reader has it, or is being made for it */
	struct kvmstats_reader *r;	/* its reader, or NULL */
	struct snap s;
};

/* The vCPUs of one monitor, sorted by qom-path, at most @limit (the
 * vCPU fds the VMM holds: no VMM has more vCPUs than that). Used under
 * the owner's lock. */
struct qmp_cpus {
	pid_t pid;
	struct qmp_cpu **v;
	size_t n, cap;
	unsigned int limit;
	size_t refused;		/* vCPUs left out at the last poll */
};

struct qmp_cpu *ks_qmp_cpu_find(const struct qmp_cpus *t, const char *qom_path);
/* Does the vCPU query-stats result @res name a vCPU not in @t? */
bool ks_qmp_cpus_news(const struct qmp_cpus *t, struct json_object *res);
/* The number of vCPU fds @pid holds (at most KS_QMP_MAX_VCPUS). */
unsigned int ks_qmp_vcpu_fds(pid_t pid);
/* A poll's vCPU results into @t: known vCPUs filled, new ones added
 * (ids from query-cpus-fast's @cpus, checked), those not listed marked
 * absent and, without a reader, dropped. 0 or -ENOMEM. */
int ks_qmp_cpus_update(struct qmp_cpus *t, const struct kvmstats_schema *sc,
		       struct json_object *res, struct json_object *cpus,
		       bool reversed);
/* Drop vCPU @c (absent, not held). */
void ks_qmp_cpu_drop(struct qmp_cpus *t, struct qmp_cpu *c);
void ks_qmp_cpus_free(struct qmp_cpus *t);

/* ---- the order of QEMU's histogram lists (qmp_order.c) ---- */

struct ks_hist_order {
	bool reversed;
	const char *from;	/* "kernel", "version", "assumed" */
};

/* The known order of QEMU release @version ("10.0.2"). */
void ks_hist_order_of_version(const char *version, struct ks_hist_order *o);
/* The order learnt for the QEMU binary @pid runs, if it was checked. */
bool ks_hist_order_known(struct kvmstats_ctx *ctx, pid_t pid,
			 struct ks_hist_order *o);

/* The kernel's readings of @pid's vCPUs around one query-stats. */
struct ks_hist_check;
/* Stats fds for @pid's vCPUs: those it holds, else (when @a allows
 * attach) ones it is made to open; NULL when there is none to be had. A
 * first reading is taken at once. */
struct ks_hist_check *ks_hist_check_start(const struct ks_source_args *a,
					  pid_t pid);
/* The second reading, and the verdict against query-stats' vCPU result
 * @vcpu_res (cpu-index by qom-path from query-cpus-fast's @cpus): true
 * with *o set when the order is clear, then remembered for the binary. */
bool ks_hist_check_end(struct ks_hist_check *c, struct json_object *vcpu_res,
		       struct json_object *cpus, struct ks_hist_order *o);
void ks_hist_check_free(struct ks_hist_check *c);

#endif
