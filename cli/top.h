/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * kvmstats top: one pipeline, as htop has it.
 *
 *   source (live host sweep | recorded log)  -> model (readings kept per
 *   target: latest, previous, baseline)  -> delta (rates, totals, interval
 *   histograms)  -> renderer (curses views, or plain text / JSON once)
 *
 * Collection never draws and drawing never reads a stats fd: a source
 * feeds the model one frame at a time, and every renderer reads the model
 * through the delta helpers below.
 */
#ifndef KVMSTATS_TOP_H
#define KVMSTATS_TOP_H

#include <regex.h>

#include "cli.h"

/* The readings of one target (a VM's stats or one vCPU's) that the
 * pipeline keeps: the latest, the one before it (rates), and the
 * baseline (totals; zeros with --include-past). */
struct top_series {
	struct kvmstats_schema *schema; /* reference held; NULL: no data */
	uint64_t *cur, *prev, *base; /* one data block each */
	uint64_t t_cur, t_prev, t_base; /* CLOCK_MONOTONIC ns */
	unsigned int n; /* readings since (re)start, capped */
	/* One bit per stat: not known at the last reading (the source
	 * refused it or does not keep it); NULL until bound. */
	uint64_t *missing;
	/* The same at the previous reading and at the baseline: a stat
	 * unknown at either has no rate, or no total, at the latest (its
	 * word there is no reading). */
	uint64_t *prev_missing, *base_missing;
	bool base_pending; /* base_missing is the next series_missing()'s */
	bool all_missing; /* every counter of it unknown */
	int index; /* vCPU index; -1 for a VM */
	bool fresh; /* fed in the frame being built */
};

/* One VM: one row of the VM list. */
struct top_vm {
	uint64_t uid; /* VMM uid (host, or the log's) */
	int vm; /* index of the VM in its VMM */
	pid_t pid;
	char name[128];
	char source[16];
	char id[64];
	bool seen; /* present in the frame being built */
	bool multi; /* its VMM holds more than one VM */
	struct top_series stats; /* the VM's own stats */
	struct top_series *vcpus; /* sorted by index */
	size_t nvcpus;
	/* The vCPUs that share vcpus[0]'s schema, summed (peaks: max);
	 * nsum says how many. */
	struct top_series sum;
	size_t nsum;
	/* Per u64 of the sum's data block: true where a peak lives. */
	bool *peak;
};

struct top_model {
	struct top_vm **vms;
	size_t nvms;
	bool include_past;
	uint64_t t_cur, t_prev; /* times of the last two frames */
	uint64_t frames;
	uint64_t wall_ns; /* CLOCK_REALTIME of a recorded frame; 0: live */
	uint32_t cols; /* the VM list's columns these VMs have (bit per column) */
};

/* ---- model (top_model.c) ------------------------------------------ */

void model_init(struct top_model *m, bool include_past);
void model_free(struct top_model *m);
/* A frame: begin, then model_vm() / series_feed() for what the source
 * read, then end (drops VMs not seen, sums vCPUs). */
void model_begin(struct top_model *m);
struct top_vm *model_vm(struct top_model *m, uint64_t uid, int vm);
struct top_series *model_vcpu(struct top_vm *vm, int index);
/* Copy one reading in (the previous one becomes prev); @restart forgets
 * earlier readings (a new writer session in a log). */
int series_feed(struct top_model *m, struct top_series *s,
		struct kvmstats_schema *schema, const void *data,
		uint64_t time_ns, bool restart);
/* The stats the source could not give at the reading just fed (NULL:
 * every one). */
void series_missing(struct top_series *s, const uint64_t *missing);
/* Is @st known in @s's latest reading? */
bool series_known(const struct top_series *s, const struct kvmstats_stat *st);
void model_end(struct top_model *m, uint64_t time_ns);
/* Totals count from now on (kvm_stat's reset). */
void model_reset(struct top_model *m);
struct top_vm *model_find(const struct top_model *m, uint64_t uid, int vm);

/* ---- delta: what renderers show (top_model.c) ---------------------- */

/* Per second over the last interval; NAN when unknown (one reading, a
 * counter that went back, or not a cumulative stat). */
double series_rate(const struct top_series *s, const struct kvmstats_stat *st);
/* Cumulative: increase since the baseline. Others: the current value. */
double series_total(const struct top_series *s, const struct kvmstats_stat *st);
/* The last interval's histogram into @out (kvmstats_stat__size()
 * entries); false when there is no interval yet. */
bool series_hist(const struct top_series *s, const struct kvmstats_stat *st,
		 uint64_t *out);
double series_interval_s(const struct top_series *s);
/* Sum of a vCPU stat's rate over a VM's vCPUs; NAN if unknown. */
double vm_rate(const struct top_vm *vm, const char *stat);
/* Share of a cumulative count-stat's total among a series' counters
 * (kvm_stat's %Total); NAN for others. */
double series_share(const struct top_series *s, const struct kvmstats_stat *st);

/* ---- options and state shared by the renderers -------------------- */

struct top_opts {
	double interval; /* seconds */
	bool once;
	bool skip_zero;
	bool include_past;
	regex_t fields;
	bool fields_set;
	const char *replay;
	bool loop; /* --replay: start again at the end */
	const struct top_banner *banner; /* the demo's, or NULL */
};

/* Values formatted for a cell. */
void fmt_count(double v, char *buf, size_t len);
void fmt_rate(const struct kvmstats_stat *st, double rate, char *buf,
	      size_t len);
void fmt_level(const struct kvmstats_stat *st, double v, unsigned int nvals,
	       char *buf, size_t len);
void fmt_quantile(const struct kvmstats_stat *st, const uint64_t *h, double q,
		  char *buf, size_t len);
/* Stat passes --fields / the view's filter and --skip-zero? */
bool stat_shown(const struct top_opts *o, const regex_t *filter,
		const struct top_series *s, const struct kvmstats_stat *st);

/* The VM list's columns (also used by --once). */
enum top_col_kind { COL_PID, COL_NAME, COL_SOURCE, COL_VCPUS, COL_RATE };

struct top_col {
	const char *title;
	int width;
	enum top_col_kind kind;
	const char *stat; /* COL_RATE: the vCPU stat summed */
	int prio; /* dropped first when the screen is narrow */
	bool x86; /* shown while there is no VM to choose by */
};

extern const struct top_col top_cols[];
extern const size_t top_ncols;
/* Does the VM list show column @c? Its stat is one some VM has: x86's
 * and arm64's exits differ, and a column no VM has would be all "-". */
static inline bool col_on(const struct top_model *m, size_t c)
{
	return m->cols & (1u << c);
}
/* The next shown column from @c, @step +1 or -1 (for the sort keys). */
size_t col_next(const struct top_model *m, size_t c, int step);
void col_cell(const struct top_col *c, const struct top_vm *vm, char *buf,
	      size_t len);
/* Sort the model's VMs by a column, descending unless @asc. */
void model_sort(struct top_model *m, size_t col, bool asc);
const char *vm_label(const struct top_vm *vm, char *buf, size_t len);
/* Why none of @vm's counters is known, or NULL when some are. */
const char *vm_unknown(const struct top_vm *vm);

/* ---- renderers ---------------------------------------------------- */

/* Plain text and JSON, for --once (top_text.c). */
int top_print_text(const struct top_opts *o, const struct top_model *m);
int top_print_json(struct cli *cli, const struct top_opts *o,
		   const struct top_model *m);

/* The curses screen (top_ui.c). */
struct top_ui;
struct top_ui *ui_open(struct top_opts *o, struct top_model *m);
void ui_close(struct top_ui *ui);
/* Draw the current view (after a frame, a key or a resize). */
void ui_draw(struct top_ui *ui);
/* Handle pending keys; returns a mask of UI_* requests. */
enum {
	UI_QUIT = 1,
	UI_REDRAW = 2,
	UI_PAUSE = 4, /* pause state toggled */
	UI_RESET = 8,
	UI_SAMPLE = 16, /* take a frame now (unpause, step) */
};
int ui_keys(struct top_ui *ui);
bool ui_paused(const struct top_ui *ui);
/* One line in the status bar (errors of the source, end of a log). */
void ui_status(struct top_ui *ui, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* What the header says about the source ("live", "replay FILE"...). */
void ui_set_title(struct top_ui *ui, const char *title);
/* Playback speed for --replay (1 = recorded pace); 0 when live. */
double ui_speed(const struct top_ui *ui);
void ui_set_replay(struct top_ui *ui, bool replay);

#endif
