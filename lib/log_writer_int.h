/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What log_sweep.c needs of the log writer (log_writer.c). */
#ifndef KVMSTATS_LOG_WRITER_INT_H
#define KVMSTATS_LOG_WRITER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvmstats_log_writer;
struct kvmstats_log_target;
struct kvmstats_reader;
struct kvmstats_schema;
struct kvmstats_vmm;

/* One reader of a sweep_host() pass, in add_vmm()'s order. */
struct lw_sweep_item {
	struct kvmstats_reader *r;
	const struct kvmstats_vmm *v;	/* NULL: swept, not written */
	int32_t vm, vcpu;
};

/* sweep_host()'s memory, kept with the writer: it grows, never shrinks. */
struct lw_sweep {
	struct lw_sweep_item *items;
	size_t nitems, citems;
	uint64_t *scratch;		/* the pread buffer, page-aligned */
	size_t scratch_size;
};

/* Add a data block (NULL with @error < 0), its delta taken against the
 * writer's own copy of the block it last wrote for the target. */
int lw_add(struct kvmstats_log_writer *w, const struct kvmstats_log_target *t,
	   struct kvmstats_schema *schema, const void *data, int error);
/* Add a reader's latest reading, as add_vmm() does. */
int lw_add_reader(struct kvmstats_log_writer *w, struct kvmstats_log_target *t,
		  struct kvmstats_reader *r);
void lw_prefetch_target(const struct kvmstats_log_writer *w, size_t ahead,
			bool block);
struct lw_sweep *lw_sweep(struct kvmstats_log_writer *w);
struct kvmstats_ctx *lw_ctx(const struct kvmstats_log_writer *w);
const char *lw_path(const struct kvmstats_log_writer *w);

#endif
