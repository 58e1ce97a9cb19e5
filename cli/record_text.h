/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The text log of `kvmstats record --log`: a vmstat-like line of rates
 * (or totals) summed over the chosen VMMs, as kvm_stat -l/-L prints
 * (see record_text.c).
 */
#ifndef KVMSTATS_CLI_RECORD_TEXT_H
#define KVMSTATS_CLI_RECORD_TEXT_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <kvmstats.h>

struct cli;
struct text_col;
struct text_colmap;

struct text_log {
	/* Set by the options. */
	struct cli *cli;	/* its format: table, CSV or JSON lines */
	const char *file;	/* --log-file; NULL: stdout */
	bool skip_zero;		/* --skip-zero */
	bool past;		/* --include-past: totals, not rates */
	bool fields_set;
	regex_t fields;		/* --fields */

	/* Kept by record_text.c. */
	FILE *out;
	struct text_col *cols;
	size_t ncols;
	bool cols_ready;
	struct text_colmap *maps;
	size_t nmaps;
	unsigned long lines;
	/* Each reader's reading at the last line and the stats it did not
	 * know (a rate needs both ends known), in visiting order. */
	struct text_seen *seen, *seen_next;
	size_t nseen, nseen_next, seen_cap;
};

/* --fields @re: 0, or -1 when it is not a regular expression (said). */
int text_log_fields(struct text_log *t, const char *re);
/* Open (again, after SIGHUP) the file, or take stdout: 0 or -1 (said). */
int text_log_open(struct text_log *t);
/* The line of sample number @sample (0 the first) of the VMMs @sel,
 * at @rt_ns (CLOCK_REALTIME). */
void text_log_line(struct text_log *t, struct kvmstats_vmm *const *sel,
		   size_t nsel, uint64_t rt_ns, unsigned long sample);
void text_log_free(struct text_log *t);

#endif
