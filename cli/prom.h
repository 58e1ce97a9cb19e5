/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Prometheus metric model of KVM's stats and its text renderings
 * (Prometheus text format 0.0.4 and OpenMetrics 1.0). Used by `serve`
 * and by bench/serve.c; depends on libkvmstats, libc and zlib only.
 */
#ifndef KVMSTATS_PROM_H
#define KVMSTATS_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmstats.h"

enum prom_format {
	PROM_TEXT,		/* text/plain; version=0.0.4 */
	PROM_OPENMETRICS,	/* application/openmetrics-text; version=1.0.0 */
};

#define PROM_TEXT_CTYPE "text/plain; version=0.0.4; charset=utf-8"
#define PROM_OM_CTYPE "application/openmetrics-text; version=1.0.0; charset=utf-8"

/* A growable output buffer; its memory is kept from one use to the next
 * (reset with len = 0). A failed allocation sets @failed and drops further
 * writes, so that callers check once at the end. */
struct prom_buf {
	char *p;
	size_t len, cap;
	bool failed;
};

/* Room for @more bytes past len; false when out of memory. */
bool prom_buf_reserve(struct prom_buf *b, size_t more);
void prom_buf_free(struct prom_buf *b);
void prom_buf_put(struct prom_buf *b, const char *s, size_t n);
void prom_buf_puts(struct prom_buf *b, const char *s);
void prom_buf_printf(struct prom_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- the model -------------------------------------------------------- */

struct prom_opts {
	bool no_histograms;	/* leave the *_hist stats out */
	/* Which VMMs to export (NULL: all). */
	bool (*select)(void *arg, struct kvmstats_vmm *v);
	void *select_arg;
};

struct prom_model;

struct prom_model *prom_model_new(const struct prom_opts *o);
void prom_model_free(struct prom_model *m);

/* Bring the model in line with the host's VMMs, VMs and vCPUs. Families,
 * targets and their label strings are rebuilt only when the set of
 * readers changed. Returns 1 when rebuilt, 0 when unchanged, -errno. */
int prom_model_update(struct prom_model *m, const struct kvmstats_host *h);

/* Take the readers' latest readings for the next render: readers whose
 * last sweep failed are left out (their series go stale) and counted. */
void prom_model_prepare(struct prom_model *m);

/* Render part @k of @n of the model's families (their current readings)
 * in @f: the parts, concatenated in order, are the whole rendering, and
 * each holds about the same number of lines. Parts may be rendered by
 * several threads at once, each into its own buffer, once
 * prom_model_prepare() ran. */
void prom_model_render_part(const struct prom_model *m, enum prom_format f,
			    size_t k, size_t n, struct prom_buf *out);
size_t prom_model_families(const struct prom_model *m);
/* Lines (samples) a whole rendering would have, when every read worked. */
size_t prom_model_lines(const struct prom_model *m);

/* The VM info family (kvmstats_vm_info: id and source of each VM). */
void prom_model_render_info(const struct prom_model *m, enum prom_format f,
			    struct prom_buf *out);

struct prom_model_stats {
	size_t vmms, vms, vcpus;	/* targets in the model */
	size_t families;
	size_t series;			/* metrics (label sets) last prepared */
	size_t skipped_stats;		/* stats of unknown type or unit */
	size_t series_cut;		/* past a VMM's share of samples */
	/* Per source (index as in kvmstats_sources(), then "other"). */
	size_t src_vms[8];
	size_t src_errors[8];		/* readers that failed at the last sweep */
	uint64_t src_age_ns[8];		/* oldest background data served */
	size_t src_read[8];		/* readings served (none: no age) */
};
void prom_model_stats(const struct prom_model *m, struct prom_model_stats *st);
/* Index of a source name in prom_model_stats' arrays. */
unsigned int prom_source_index(const char *source);
#define PROM_NSRC 6

/* ---- small writers for the exporter's own metrics --------------------- */

/* HELP/TYPE(/UNIT) lines of a family. @type is "counter", "gauge" or
 * "info"-less types; for a counter @name is given without "_total". */
void prom_family(struct prom_buf *b, enum prom_format f, const char *name,
		 const char *type, const char *unit, const char *help);
/* One sample: name (with its suffix), labels ("a=\"b\"" or NULL), value. */
void prom_sample(struct prom_buf *b, const char *name, const char *labels,
		 double v);
void prom_sample_u64(struct prom_buf *b, const char *name, const char *labels,
		     uint64_t v);
/* End of an exposition ("# EOF" in OpenMetrics). */
void prom_end(struct prom_buf *b, enum prom_format f);

/* Escape a label value (backslash, quote, newline; bytes that are not
 * UTF-8 become '?'): at most 4 * strlen(s) + 1 bytes in @out. */
size_t prom_escape_label(const char *s, char *out, size_t len);

/* ---- threads and expositions ------------------------------------------ */

#define PROM_MAX_PARTS 64

/* Worker threads (created once, kept) that render and compress. */
struct prom_pool;
/* @threads: 0 for one per online CPU; 1 for none besides the caller. */
struct prom_pool *prom_pool_new(unsigned int threads);
void prom_pool_free(struct prom_pool *p);
unsigned int prom_pool_threads(const struct prom_pool *p);
/* fn(arg, i) for every i < njobs, on the pool's threads and the caller's. */
void prom_pool_run(struct prom_pool *p, size_t njobs,
		   void (*fn)(void *arg, size_t i), void *arg);

/* One exposition: the model's families in parts (one per thread), then a
 * tail part of the caller's (the exporter's own metrics, # EOF), and the
 * same compressed as one gzip member. Buffers are kept across resets. */
struct prom_expo {
	enum prom_format fmt;
	size_t nparts;				/* parts before the tail */
	struct prom_buf part[PROM_MAX_PARTS + 1];
	bool gz_ready;
	struct prom_buf zpart[PROM_MAX_PARTS + 1];
	unsigned char gz_head[10], gz_tail[8];
};

void prom_expo_reset(struct prom_expo *e, enum prom_format fmt);
void prom_expo_free(struct prom_expo *e);
int prom_expo_render(struct prom_pool *pool, const struct prom_model *m,
		     struct prom_expo *e);
/* The caller's part, after the families. */
struct prom_buf *prom_expo_tail(struct prom_expo *e);
/* Compress every part of @src, in parallel, into @dst's gzip parts (@dst
 * may be @src); does nothing when @dst's are ready. */
int prom_expo_gzip(struct prom_pool *pool, const struct prom_expo *src,
		   struct prom_expo *dst, int level);
size_t prom_expo_len(const struct prom_expo *e, bool gz);
/* The parts as iovecs (plain or gzip); returns how many were filled. */
struct iovec;
size_t prom_expo_iov(const struct prom_expo *e, bool gz, struct iovec *iov,
		     size_t max);

/* Write @v in decimal at @p; returns the length (at most 20). */
size_t prom_u64(char *p, uint64_t v);

#endif
