/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The curses screen's insides, shared by the frame, its helpers and keys
 * (top_ui.c) and the views (top_views.c). top.h is the screen's API.
 */
#ifndef KVMSTATS_TOP_UI_H
#define KVMSTATS_TOP_UI_H

#include <curses.h>

#include "top.h"

enum view { V_LIST, V_VM, V_VCPU, V_HELP, V_COUNT };

struct top_ui {
	struct top_opts *o;
	struct top_model *m;
	enum view view, back;
	/* VM list: the selection is a key, so that it survives re-sorting. */
	uint64_t sel_uid;
	int sel_vm;
	size_t sel, first;
	size_t sort_col;
	bool sort_asc;
	regex_t vm_re;
	bool vm_re_set;
	char vm_filter[128];
	/* Drilled into: this VM. */
	uint64_t cur_uid;
	int cur_vm;
	int scroll, hscroll, nlines;
	regex_t stat_re;
	bool stat_re_set;
	char stat_filter[128];
	/* The rest of the state. */
	bool paused, replay, utf8;
	double speed;
	char status[256];
	char title[256];
	int input; /* 0, or the key that opened the input line */
	char line[128];
	size_t line_len;
	SCREEN *screen;
};

struct view_ops {
	const char *name;
	void (*draw)(struct top_ui *ui, int y, int rows);
	/* Returns UI_* requests, or -1 when the key is not the view's. */
	int (*key)(struct top_ui *ui, int ch);
	const char *hints;
};

/* The views (top_views.c), by enum view. */
extern const struct view_ops top_views[V_COUNT];

/* ---- drawing helpers (top_ui.c) -------------------------------------- */

/* Text clipped to the screen: names (escaped here, whatever a VMM or a
 * log put in them), numbers, units. */
void ui_put(int y, int x, int attr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A whole line in reverse video (headers). */
void ui_bar_line(int y, const char *text);
/* A histogram's bar, UTF-8 blocks or ASCII as the terminal takes. */
void ui_hist_bar(struct top_ui *ui, int y, int x, int width,
		 const struct kvmstats_stat *st, const uint64_t *h);
/* The VM drilled into (NULL when it has gone). */
struct top_vm *ui_cur_vm(const struct top_ui *ui);
/* The VMs the list shows, in order, into @out; returns how many. */
size_t ui_visible_vms(const struct top_ui *ui, struct top_vm **out);
/* Open the input line of filter @which ('f': stats, 'g': VMs). */
void ui_open_input(struct top_ui *ui, int which);


#endif
