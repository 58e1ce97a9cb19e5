/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What log_sweep.c needs of the log writer (log_writer.c). */
#ifndef KVMSTATS_LOG_WRITER_INT_H
#define KVMSTATS_LOG_WRITER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvmstats_host;
struct kvmstats_log_writer;
struct kvmstats_log_target;
struct kvmstats_reader;
struct kvmstats_schema;
struct kvmstats_vmm;

struct wtarget;

/* One reader of a sweep_host() pass, in add_vmm()'s order. */
struct lw_sweep_item {
	struct wtarget *wt; /* the writer's target, once known */
	uint32_t size; /* fd readers: the data block's */
	int fd; /* -1: not an fd, swept by the reader */
	off_t offset;
	struct kvmstats_reader *r;
	const struct kvmstats_vmm *v; /* NULL: swept, not written */
	int32_t vm, vcpu;
};

/* sweep_host()'s memory, kept with the writer: it grows, never shrinks.
 * The list holds while the host, its generation, the writer's freed
 * count and the caller's choice stay what they were when it was made. */
struct lw_sweep {
	struct lw_sweep_item *items;
	size_t nitems, citems;
	uint64_t *scratch; /* the pread buffer, page-aligned */
	size_t scratch_size;
	bool valid;
	const struct kvmstats_host *host;
	uint64_t host_gen, freed;
	bool (*choose)(const struct kvmstats_vmm *v, void *arg);
	void *arg;
};

/* Add a reader's latest reading, as add_vmm() does. */
int lw_add_reader(struct kvmstats_log_writer *w, struct kvmstats_log_target *t,
		  struct kvmstats_reader *r);
/* The target of @t in the sample begun, found or made (NULL with errno);
 * it lives until lw_freed() moves. */
struct wtarget *lw_target(struct kvmstats_log_writer *w,
			  const struct kvmstats_log_target *t,
			  struct kvmstats_schema *schema);
/* lw_add() for a target lw_target() gave. */
int lw_add_target(struct kvmstats_log_writer *w, struct wtarget *wt,
		  const void *data, int error);
uint64_t lw_freed(const struct kvmstats_log_writer *w);
/* Warm @wt's struct, or (@block) its copy of a block of @data_size. */
void lw_prefetch_target(const struct wtarget *wt, size_t data_size, bool block);
struct lw_sweep *lw_sweep(struct kvmstats_log_writer *w);
struct kvmstats_ctx *lw_ctx(const struct kvmstats_log_writer *w);
const char *lw_path(const struct kvmstats_log_writer *w);

#endif
