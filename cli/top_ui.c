// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top: the curses screen. Views are a table of functions (draw
 * the body, handle a key), as htop's panels are; none of them reads a
 * stats fd, they only read the model through the delta helpers.
 *
 * The screen assumes nothing beyond 80x24, no colours (reverse and bold
 * only) and either UTF-8 (block-character histogram bars) or plain ASCII.
 */
#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sanitize.h"
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

static const struct view_ops views[V_COUNT];
static void open_input(struct top_ui *ui, int which);

/* ---- drawing helpers ------------------------------------------------ */

/* Text clipped to the screen: names (escaped here, whatever a VMM or a
 * log put in them), numbers, units. */
static void put(int y, int x, int attr, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void put(int y, int x, int attr, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (y < 0 || y >= LINES || x >= COLS)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	attron(attr);
	mvaddnstr(y, x, safe_str(buf), COLS - x);
	attroff(attr);
}

/* A whole line in reverse video (headers). */
static void bar_line(int y, const char *text)
{
	attron(A_REVERSE);
	mvhline(y, 0, ' ', COLS);
	mvaddnstr(y, 0, safe_str(text), COLS);
	attroff(A_REVERSE);
}

/* The same shape as hist_bar() for terminals without UTF-8. */
static void ascii_bar(const struct kvmstats_stat *st, const uint64_t *v,
		      char *buf, size_t len, int width)
{
	static const char lv[] = "_.:-=+*#";
	uint32_t n = kvmstats_stat__size(st), first = n, last = 0;
	uint64_t max = 0;
	size_t used = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (!v[i])
			continue;
		first = first == n ? i : first;
		last = i;
		max = v[i] > max ? v[i] : max;
	}
	for (uint32_t i = first;
	     max && i <= last && (int)(i - first) < width && used + 1 < len;
	     i++)
		buf[used++] =
			v[i] ? lv[(int)((double)v[i] * 7 / (double)max)] : ' ';
	buf[used] = 0;
}

static void draw_hist_bar(struct top_ui *ui, int y, int x, int width,
			  const struct kvmstats_stat *st, const uint64_t *h)
{
	char buf[512];

	if (width <= 0)
		return;
	if (width > 64)
		width = 64;
	if (ui->utf8)
		hist_bar(st, h, buf, sizeof(buf), width);
	else
		ascii_bar(st, h, buf, sizeof(buf), width);
	mvaddstr(y, x, buf);
}

static struct top_vm *cur_vm(const struct top_ui *ui)
{
	return model_find(ui->m, ui->cur_uid, ui->cur_vm);
}

static bool vm_visible(const struct top_ui *ui, const struct top_vm *vm)
{
	char pid[16];

	if (!ui->vm_re_set)
		return true;
	snprintf(pid, sizeof(pid), "%d", (int)vm->pid);
	return !regexec(&ui->vm_re, vm->name, 0, NULL, 0) ||
	       !regexec(&ui->vm_re, pid, 0, NULL, 0);
}

/* The VMs the list shows, in order; returns how many. */
static size_t visible_vms(const struct top_ui *ui, struct top_vm **out)
{
	size_t n = 0;

	for (size_t i = 0; i < ui->m->nvms; i++)
		if (vm_visible(ui, ui->m->vms[i]))
			out[n++] = ui->m->vms[i];
	return n;
}

/* ---- the VM list ------------------------------------------------------ */

/* Columns that fit: the least important go first; the name takes what
 * is left, up to 32 cells. */
static int fit_cols(bool *use, int *name_w)
{
	int width = 0, worst;

	for (size_t c = 0; c < top_ncols; c++) {
		use[c] = true;
		width += top_cols[c].width + 1;
	}
	while (width > COLS) {
		worst = -1;
		for (size_t c = 0; c < top_ncols; c++)
			if (use[c] && top_cols[c].prio &&
			    (worst < 0 ||
			     top_cols[c].prio > top_cols[worst].prio))
				worst = (int)c;
		if (worst < 0)
			break;
		use[worst] = false;
		width -= top_cols[worst].width + 1;
	}
	*name_w = 16 + (COLS - width > 0 ? COLS - width : 0);
	if (*name_w > 32)
		*name_w = 32;
	return width;
}

static void list_row(int y, const struct top_vm *vm, const bool *use,
		     int name_w, bool selected)
{
	char cell[160];
	int x = 0;

	if (selected) {
		attron(A_REVERSE);
		mvhline(y, 0, ' ', COLS);
	}
	for (size_t c = 0; c < top_ncols; c++) {
		int w = top_cols[c].kind == COL_NAME ? name_w
						     : top_cols[c].width;

		if (!use[c])
			continue;
		if (vm)
			col_cell(&top_cols[c], vm, cell, sizeof(cell));
		else
			snprintf(cell, sizeof(cell), "%s", top_cols[c].title);
		if (top_cols[c].kind == COL_NAME)
			put(y, x, 0, "%-*.*s", w, w, cell);
		else
			put(y, x, 0, "%*.*s", w, w, cell);
		x += w + 1;
	}
	if (selected)
		attroff(A_REVERSE);
}

static void list_draw(struct top_ui *ui, int y, int rows)
{
	struct top_vm **vis = calloc(ui->m->nvms + 1, sizeof(*vis));
	bool use[top_ncols];
	int name_w;
	size_t n;

	if (!vis)
		return;
	model_sort(ui->m, ui->sort_col, ui->sort_asc);
	n = visible_vms(ui, vis);
	/* Follow the selected VM wherever the sort moved it. */
	for (size_t i = 0; i < n; i++)
		if (vis[i]->uid == ui->sel_uid && vis[i]->vm == ui->sel_vm)
			ui->sel = i;
	if (ui->sel >= n)
		ui->sel = n ? n - 1 : 0;
	if (n) {
		ui->sel_uid = vis[ui->sel]->uid;
		ui->sel_vm = vis[ui->sel]->vm;
	}
	fit_cols(use, &name_w);
	put(y, 0, A_BOLD, "VMs sorted by %s (%s)%s%s",
	    top_cols[ui->sort_col].title,
	    ui->sort_asc ? "ascending" : "descending",
	    ui->vm_re_set ? "  filter: " : "",
	    ui->vm_re_set ? ui->vm_filter : "");
	attron(A_REVERSE);
	mvhline(y + 1, 0, ' ', COLS);
	list_row(y + 1, NULL, use, name_w, false);
	attroff(A_REVERSE);
	rows -= 2;
	if (ui->sel < ui->first)
		ui->first = ui->sel;
	if (rows > 0 && ui->sel >= ui->first + (size_t)rows)
		ui->first = ui->sel - (size_t)rows + 1;
	for (int r = 0; r < rows && ui->first + (size_t)r < n; r++)
		list_row(y + 2 + r, vis[ui->first + r], use, name_w,
			 ui->first + (size_t)r == ui->sel);
	if (!n)
		put(y + 3, 2, 0, "%s",
		    ui->m->nvms ? "no VM matches the filter ('c' clears it)"
		    : ui->m->frames
			    ? "no VM found" : "reading...");
	if (!n && !ui->m->nvms && ui->m->frames)
		put(y + 4, 2, 0, "%s", demo_hint());
	free(vis);
}

static void select_move(struct top_ui *ui, long delta)
{
	struct top_vm **vis = calloc(ui->m->nvms + 1, sizeof(*vis));
	long n, s;

	if (!vis)
		return;
	n = (long)visible_vms(ui, vis);
	s = (long)ui->sel + delta;
	s = s >= n ? n - 1 : s;
	s = s < 0 ? 0 : s;
	ui->sel = (size_t)s;
	if (n) {
		ui->sel_uid = vis[s]->uid;
		ui->sel_vm = vis[s]->vm;
	}
	free(vis);
}

static int open_selected(struct top_ui *ui, enum view v)
{
	if (!model_find(ui->m, ui->sel_uid, ui->sel_vm))
		return 0;
	ui->cur_uid = ui->sel_uid;
	ui->cur_vm = ui->sel_vm;
	ui->view = v;
	ui->scroll = 0;
	ui->hscroll = 0;
	return UI_REDRAW;
}

static int list_key(struct top_ui *ui, int ch)
{
	int page = LINES - 6 > 1 ? LINES - 6 : 1;

	switch (ch) {
	case KEY_UP:
	case 'k':
		select_move(ui, -1);
		return UI_REDRAW;
	case KEY_DOWN:
	case 'j':
		select_move(ui, 1);
		return UI_REDRAW;
	case KEY_PPAGE:
		select_move(ui, -page);
		return UI_REDRAW;
	case KEY_NPAGE:
		select_move(ui, page);
		return UI_REDRAW;
	case KEY_HOME:
		select_move(ui, -(long)ui->m->nvms);
		return UI_REDRAW;
	case KEY_END:
		select_move(ui, (long)ui->m->nvms);
		return UI_REDRAW;
	case '\n':
	case '\r':
	case KEY_ENTER:
	case KEY_RIGHT:
		return open_selected(ui, V_VM);
	case '\t':
	case 'v':
		return open_selected(ui, V_VCPU);
	case '/':
		open_input(ui, 'g');
		return UI_REDRAW;
	case 's':
	case '>':
		ui->sort_col = (ui->sort_col + 1) % top_ncols;
		return UI_REDRAW;
	case '<':
		ui->sort_col = (ui->sort_col + top_ncols - 1) % top_ncols;
		return UI_REDRAW;
	case 'S':
	case 'o':
		ui->sort_asc = !ui->sort_asc;
		return UI_REDRAW;
	}
	/* 1..9 and 0: sort by that column. */
	if (ch >= '0' && ch <= '9') {
		size_t c = ch == '0' ? 9 : (size_t)(ch - '1');

		if (c < top_ncols) {
			if (ui->sort_col == c)
				ui->sort_asc = !ui->sort_asc;
			ui->sort_col = c;
			return UI_REDRAW;
		}
	}
	return -1;
}

/* ---- one VM, one row per stat ---------------------------------------- */

/* A line of the VM view: a section title, a stat, or the bar and
 * percentiles under a histogram. */
struct vm_line {
	const struct top_series *s;
	const struct kvmstats_stat *st;
	int kind; /* 0 title, 1 stat, 2 histogram detail */
	unsigned int nvals;
};

static int vm_lines(struct top_ui *ui, const struct top_vm *vm,
		    struct vm_line *out, int max)
{
	const struct top_series *part[2] = {&vm->stats, &vm->sum};
	const struct kvmstats_stat *st;
	int n = 0;

	for (int p = 0; p < 2; p++) {
		const struct top_series *s = part[p];
		unsigned int nvals = p ? (unsigned int)vm->nsum : 1;
		int title = n;

		if (!s->schema || n >= max)
			continue;
		out[n++] = (struct vm_line){s, NULL, 0, nvals};
		kvmstats_schema__for_each (st, s->schema) {
			if (!stat_shown(ui->o,
					ui->stat_re_set ? &ui->stat_re : NULL,
					s, st))
				continue;
			if (n < max)
				out[n++] = (struct vm_line){s, st, 1, nvals};
			if (stat_is_hist(st) && n < max)
				out[n++] = (struct vm_line){s, st, 2, 0};
		}
		/* No title over an empty section. */
		if (n == title + 1)
			n = title;
	}
	return n;
}

static void vm_stat_line(int y, int name_w, const struct vm_line *l)
{
	const struct kvmstats_stat *st = l->st;
	unsigned int type = kvmstats_stat__type(st);
	char total[48], rate[48], share[16] = "";
	double sh;

	if (stat_is_hist(st)) {
		uint64_t h[kvmstats_stat__size(st)];
		double dt = series_interval_s(l->s);

		fmt_count(series_total(l->s, st), total, sizeof(total));
		if (series_hist(l->s, st, h) && !isnan(dt))
			fmt_count((double)kvmstats_hist__count(st, h) / dt,
				  rate, sizeof(rate));
		else
			snprintf(rate, sizeof(rate), "-");
	} else if (type == KVMSTATS_TYPE_CUMULATIVE) {
		fmt_level(st, series_total(l->s, st), 1, total, sizeof(total));
		fmt_rate(st, series_rate(l->s, st), rate, sizeof(rate));
		sh = series_share(l->s, st);
		if (!isnan(sh))
			snprintf(share, sizeof(share), "%.1f", sh);
	} else {
		fmt_level(st, series_total(l->s, st), l->nvals, total,
			  sizeof(total));
		/* Levels and maxima have no rate; say which they are. */
		snprintf(rate, sizeof(rate), "%s",
			 type == KVMSTATS_TYPE_PEAK ? "max" : "now");
	}
	put(y, 0, 0, "%-*.*s %12s %12s %6s", name_w, name_w,
	    kvmstats_stat__name(st), total, rate, share);
}

static void vm_hist_line(struct top_ui *ui, int y, const struct vm_line *l)
{
	const struct kvmstats_stat *st = l->st;
	uint64_t h[kvmstats_stat__size(st)];
	bool have = series_hist(l->s, st, h);
	char q[3][32], text[128];
	int len, bar_w;

	fmt_quantile(st, have ? h : NULL, 0.5, q[0], sizeof(q[0]));
	fmt_quantile(st, have ? h : NULL, 0.9, q[1], sizeof(q[1]));
	fmt_quantile(st, have ? h : NULL, 0.99, q[2], sizeof(q[2]));
	len = snprintf(text, sizeof(text), "p50 %s  p90 %s  p99 %s", q[0], q[1],
		       q[2]);
	/* Percentiles first: they matter more than the bar when narrow. */
	put(y, 4, 0, "%s", text);
	bar_w = COLS - 4 - len - 3;
	if (have && kvmstats_hist__count(st, h))
		draw_hist_bar(ui, y, 4 + len + 2, bar_w > 32 ? 32 : bar_w, st,
			      h);
}

static int name_width(void)
{
	int w = COLS - 34;

	return w > 28 ? 28 : w < 12 ? 12 : w;
}

static void clamp_scroll(struct top_ui *ui, int rows)
{
	if (ui->scroll > ui->nlines - rows)
		ui->scroll = ui->nlines - rows;
	if (ui->scroll < 0)
		ui->scroll = 0;
}

/* Whose totals the TOTAL column holds. */
static void since_text(const struct top_ui *ui, const struct top_series *s,
		       char *buf, size_t len)
{
	double secs = (double)(s->t_cur - s->t_base) / 1e9;

	if (ui->m->include_past && s->t_base == s->t_cur)
		snprintf(buf, len, "totals: since VM start");
	else if (ui->m->include_past)
		snprintf(buf, len, "totals: VM start + %.0f s", secs);
	else
		snprintf(buf, len, "totals: last %.0f s", secs);
}

static void vm_title(struct top_ui *ui, int y, const struct top_vm *vm)
{
	char label[160], since[64], id[80] = "";
	const struct top_series *s = vm->sum.schema ? &vm->sum : &vm->stats;
	double dt = series_interval_s(s);

	since_text(ui, s, since, sizeof(since));
	if (COLS >= 100)
		snprintf(id, sizeof(id), "  %s", vm->id);
	put(y, 0, A_BOLD, "%s  pid %d%s  %s  %zu vCPU%s  rates/%.2g s  %s",
	    vm_label(vm, label, sizeof(label)), (int)vm->pid, id, vm->source,
	    vm->nvcpus, vm->nvcpus == 1 ? "" : "s", isnan(dt) ? 0.0 : dt,
	    since);
}

static void vm_draw(struct top_ui *ui, int y, int rows)
{
	struct top_vm *vm = cur_vm(ui);
	struct vm_line lines[512];
	int name_w = name_width();
	char head[256];

	if (!vm)
		return;
	vm_title(ui, y, vm);
	snprintf(head, sizeof(head), "%-*s %12s %12s %6s", name_w, "STAT",
		 "TOTAL", "RATE/s", "%TOTAL");
	bar_line(y + 1, head);
	rows -= 2;
	ui->nlines = vm_lines(ui, vm, lines, 512);
	clamp_scroll(ui, rows);
	for (int r = 0; r < rows && ui->scroll + r < ui->nlines; r++) {
		const struct vm_line *l = &lines[ui->scroll + r];

		if (l->kind == 0 && l->s == &vm->stats)
			put(y + 2 + r, 0, A_BOLD, "VM stats");
		else if (l->kind == 0)
			put(y + 2 + r, 0, A_BOLD,
			    "vCPU stats, %u vCPU%s summed", l->nvals,
			    l->nvals == 1 ? "" : "s");
		else if (l->kind == 1)
			vm_stat_line(y + 2 + r, name_w, l);
		else
			vm_hist_line(ui, y + 2 + r, l);
	}
}

static int scroll_key(struct top_ui *ui, int ch)
{
	int page = LINES - 6 > 1 ? LINES - 6 : 1;

	switch (ch) {
	case KEY_UP:
	case 'k':
		ui->scroll--;
		return UI_REDRAW;
	case KEY_DOWN:
	case 'j':
		ui->scroll++;
		return UI_REDRAW;
	case KEY_PPAGE:
		ui->scroll -= page;
		return UI_REDRAW;
	case KEY_NPAGE:
		ui->scroll += page;
		return UI_REDRAW;
	case KEY_HOME:
		ui->scroll = 0;
		return UI_REDRAW;
	case KEY_END:
		ui->scroll = 1 << 20;
		return UI_REDRAW;
	case 27: /* Esc */
	case KEY_LEFT:
	case KEY_BACKSPACE:
	case 127:
		ui->view = V_LIST;
		return UI_REDRAW;
	case '/':
		open_input(ui, 'f');
		return UI_REDRAW;
	}
	return -1;
}

static int vm_key(struct top_ui *ui, int ch)
{
	switch (ch) {
	case '\t':
	case 'v':
		ui->view = V_VCPU;
		ui->scroll = 0;
		return UI_REDRAW;
	}
	return scroll_key(ui, ch);
}

/* ---- one VM's vCPUs side by side ------------------------------------- */

#define VCPU_W 10

/* A row of the vCPU view: a stat, or one percentile of a histogram. */
struct vcpu_row {
	const struct kvmstats_stat *st;
	double q; /* histograms: the quantile; else 0 */
};

static int vcpu_rows(struct top_ui *ui, const struct top_vm *vm,
		     struct vcpu_row *out, int max)
{
	static const double qs[] = {0.5, 0.9, 0.99};
	const struct kvmstats_stat *st;
	const struct top_series *s0 = vm->nvcpus ? &vm->vcpus[0] : NULL;
	int n = 0;

	if (!s0 || !s0->schema)
		return 0;
	kvmstats_schema__for_each (st, s0->schema) {
		if (!stat_shown(ui->o, ui->stat_re_set ? &ui->stat_re : NULL,
				&vm->sum, st))
			continue;
		if (!stat_is_hist(st)) {
			if (n < max)
				out[n++] = (struct vcpu_row){st, 0};
			continue;
		}
		for (size_t i = 0; i < 3 && n < max; i++)
			out[n++] = (struct vcpu_row){st, qs[i]};
	}
	return n;
}

static void vcpu_cell(const struct top_series *s, const struct vcpu_row *row,
		      char *buf, size_t len)
{
	const struct kvmstats_stat *st;
	unsigned int type;

	/* A vCPU of another schema (an odd one out) may lack the stat. */
	st = s->schema ? kvmstats_schema__find(s->schema,
					       kvmstats_stat__name(row->st))
		       : NULL;
	if (!st || kvmstats_stat__type(st) != kvmstats_stat__type(row->st)) {
		snprintf(buf, len, "-");
		return;
	}
	type = kvmstats_stat__type(st);
	if (stat_is_hist(st)) {
		uint64_t h[kvmstats_stat__size(st)];

		fmt_quantile(st, series_hist(s, st, h) ? h : NULL, row->q, buf,
			     len);
	} else if (type == KVMSTATS_TYPE_CUMULATIVE) {
		fmt_rate(st, series_rate(s, st), buf, len);
	} else {
		fmt_level(st, series_total(s, st), 1, buf, len);
	}
}

static int hist_stem(const char *name)
{
	size_t n = strlen(name);

	return n > 5 && !strcmp(name + n - 5, "_hist") ? (int)n - 5 : (int)n;
}

static void vcpu_draw(struct top_ui *ui, int y, int rows)
{
	struct top_vm *vm = cur_vm(ui);
	struct vcpu_row list[512];
	int name_w = COLS - 5 * (VCPU_W + 1) >= 24 ? 24 : 20;
	int ncols = (COLS - name_w) / (VCPU_W + 1);
	char cell[48], name[64];

	if (!vm)
		return;
	ncols = ncols < 1 ? 1 : ncols;
	if (ui->hscroll > (int)vm->nvcpus - ncols)
		ui->hscroll = (int)vm->nvcpus - ncols;
	if (ui->hscroll < 0)
		ui->hscroll = 0;
	vm_title(ui, y, vm);
	attron(A_REVERSE);
	mvhline(y + 1, 0, ' ', COLS);
	put(y + 1, 0, 0, "%-*s", name_w,
	    vm->nvcpus > (size_t)ncols ? "STAT (Left/Right: more)" : "STAT");
	for (int c = 0; c < ncols && ui->hscroll + c < (int)vm->nvcpus; c++) {
		snprintf(cell, sizeof(cell), "vcpu%d",
			 vm->vcpus[ui->hscroll + c].index);
		put(y + 1, name_w + c * (VCPU_W + 1), 0, " %*s", VCPU_W, cell);
	}
	attroff(A_REVERSE);
	rows -= 2;
	ui->nlines = vcpu_rows(ui, vm, list, 512);
	clamp_scroll(ui, rows);
	for (int r = 0; r < rows && ui->scroll + r < ui->nlines; r++) {
		const struct vcpu_row *row = &list[ui->scroll + r];

		/* "halt_wait p99": the _hist suffix says nothing here. */
		if (stat_is_hist(row->st))
			snprintf(name, sizeof(name), "%.*s p%.0f",
				 hist_stem(kvmstats_stat__name(row->st)),
				 kvmstats_stat__name(row->st), row->q * 100);
		else
			snprintf(name, sizeof(name), "%s",
				 kvmstats_stat__name(row->st));
		put(y + 2 + r, 0, 0, "%-*.*s", name_w, name_w, name);
		for (int c = 0; c < ncols && ui->hscroll + c < (int)vm->nvcpus;
		     c++) {
			vcpu_cell(&vm->vcpus[ui->hscroll + c], row, cell,
				  sizeof(cell));
			put(y + 2 + r, name_w + c * (VCPU_W + 1), 0, " %*.*s",
			    VCPU_W, VCPU_W, cell);
		}
	}
}

static int vcpu_key(struct top_ui *ui, int ch)
{
	switch (ch) {
	case '\t':
	case 'v':
		ui->view = V_VM;
		ui->scroll = 0;
		return UI_REDRAW;
	case KEY_RIGHT:
	case 'l':
		ui->hscroll++;
		return UI_REDRAW;
	case KEY_LEFT:
		/* Left scrolls back first, and leaves the view at column 0. */
		if (ui->hscroll > 0) {
			ui->hscroll--;
			return UI_REDRAW;
		}
		break;
	}
	return scroll_key(ui, ch);
}

/* ---- help ------------------------------------------------------------ */

static const char *const help_text[] = {
	"kvmstats top: KVM statistics of every VM, from the binary stats "
	"interface",
	"",
	"  Enter, Right   open the selected VM: one row per stat",
	"  v, Tab         switch between the VM view and its vCPUs side by "
	"side",
	"  Esc, Left      back to the VM list",
	"  Up/Down PgUp/PgDn Home/End   move or scroll; Left/Right: more vCPUs",
	"  s, >  <        sort by the next / previous column; 1-9, 0: by "
	"column N",
	"  S, o           reverse the sort order",
	"  /              filter: VMs (name or pid) in the list, stats "
	"elsewhere",
	"  f  g           filter stats / VMs by a regex (like kvm_stat); c "
	"clears",
	"  z              hide / show rows that are zero (kvm_stat -z)",
	"  p, space       pause and resume",
	"  r              reset: totals count from now (kvm_stat's reset)",
	"  + -            replay: play faster / slower",
	"  h, ?           this help;  q quits",
	"",
	"TOTAL: increase since the start (or reset; with -i, since the VM "
	"began).",
	"RATE/s: per second over the last interval. %TOTAL: share of all "
	"counts.",
	"Levels (now) and maxima (max) are shown as they are, never as rates.",
	"Histograms: p50/p90/p99 and the bar are of the last interval.",
	"",
	"Press any key to go back.",
};

static void help_draw(struct top_ui *ui, int y, int rows)
{
	(void)ui;
	for (int i = 0;
	     i < rows && i < (int)(sizeof(help_text) / sizeof(*help_text)); i++)
		put(y + i, 0, i ? 0 : A_BOLD, "%s", help_text[i]);
}

static int help_key(struct top_ui *ui, int ch)
{
	(void)ch;
	ui->view = ui->back;
	return UI_REDRAW;
}

static const struct view_ops views[V_COUNT] = {
	[V_LIST] = {"VMs", list_draw, list_key,
		    "q:quit h:help Enter:open v:vCPUs s:sort /:filter p:pause "
		    "r:reset"},
	[V_VM] = {"VM", vm_draw, vm_key,
		  "q:quit h:help Esc:back v:vCPUs /:filter z:zeros p:pause "
		  "r:reset"},
	[V_VCPU] = {"vCPUs", vcpu_draw, vcpu_key,
		    "q:quit h:help Esc:back v:VM Left/Right:vCPUs /:filter "
		    "p:pause"},
	[V_HELP] = {"help", help_draw, help_key, "any key: back"},
};

/* ---- the frame around every view ----------------------------------- */

static void header(struct top_ui *ui)
{
	char text[512], clock[48] = "", hms[16] = "";
	size_t vcpus = 0;
	/* A log shows the time it was recorded, and the playback speed. */
	time_t now = ui->m->wall_ns ? (time_t)(ui->m->wall_ns / 1000000000ull)
				    : time(NULL);
	struct tm tm;

	for (size_t i = 0; i < ui->m->nvms; i++)
		vcpus += ui->m->vms[i]->nvcpus;
	if (localtime_r(&now, &tm))
		strftime(hms, sizeof(hms), "%H:%M:%S", &tm);
	if (ui->replay)
		snprintf(clock, sizeof(clock), "x%g %s", ui->speed, hms);
	else
		snprintf(clock, sizeof(clock), "%s", hms);
	snprintf(text, sizeof(text),
		 "kvmstats top%s%s  %zu VM%s %zu vCPU%s  every %.3g s%s",
		 ui->title[0] ? " " : "", ui->title, ui->m->nvms,
		 ui->m->nvms == 1 ? "" : "s", vcpus, vcpus == 1 ? "" : "s",
		 ui->o->interval, ui->paused ? "  PAUSED" : "");
	put(0, 0, A_BOLD, "%s", text);
	if ((int)(strlen(text) + strlen(clock) + 2) < COLS)
		put(0, COLS - (int)strlen(clock), 0, "%s", clock);
}

static void footer(struct top_ui *ui)
{
	const char *what = ui->input == 'g' ? "filter VMs (regex, name or pid)"
					    : "filter stats (regex)";

	move(LINES - 1, 0);
	clrtoeol();
	if (ui->input) {
		put(LINES - 1, 0, 0, "%s: %.*s", what, (int)ui->line_len,
		    ui->line);
		curs_set(1);
		return;
	}
	curs_set(0);
	if (ui->status[0])
		put(LINES - 1, 0, A_BOLD, "%s", ui->status);
	else
		put(LINES - 1, 0, A_REVERSE, "%s", views[ui->view].hints);
}

void ui_draw(struct top_ui *ui)
{
	erase();
	if (COLS < 40 || LINES < 8) {
		put(0, 0, 0, "terminal too small (%dx%d)", COLS, LINES);
		refresh();
		return;
	}
	/* A VM that went away takes its view with it. */
	if ((ui->view == V_VM || ui->view == V_VCPU) && !cur_vm(ui)) {
		ui->view = V_LIST;
		ui_status(ui, "the VM has gone");
	}
	header(ui);
	views[ui->view].draw(ui, 1, LINES - 2);
	footer(ui);
	refresh();
}

/* ---- keys ------------------------------------------------------------- */

static void set_filter(struct top_ui *ui, int which, const char *text)
{
	regex_t *re = which == 'g' ? &ui->vm_re : &ui->stat_re;
	bool *set = which == 'g' ? &ui->vm_re_set : &ui->stat_re_set;
	char *store = which == 'g' ? ui->vm_filter : ui->stat_filter;

	if (*set)
		regfree(re);
	*set = false;
	store[0] = 0;
	if (!text[0])
		return;
	if (regcomp(re, text, REG_EXTENDED | REG_NOSUB | REG_ICASE)) {
		ui_status(ui, "not a valid regular expression: %s", text);
		return;
	}
	*set = true;
	snprintf(store, 128, "%s", text);
}

static int input_key(struct top_ui *ui, int ch)
{
	switch (ch) {
	case 27:
		ui->input = 0;
		break;
	case '\n':
	case '\r':
	case KEY_ENTER:
		ui->line[ui->line_len] = 0;
		set_filter(ui, ui->input, ui->line);
		ui->input = 0;
		ui->first = 0;
		ui->scroll = 0;
		break;
	case KEY_BACKSPACE:
	case 127:
	case 8:
		if (ui->line_len)
			ui->line_len--;
		break;
	case 21: /* ^U: the whole line */
		ui->line_len = 0;
		break;
	default:
		if (ch >= ' ' && ch < 127 &&
		    ui->line_len + 1 < sizeof(ui->line))
			ui->line[ui->line_len++] = (char)ch;
	}
	return UI_REDRAW;
}

static void open_input(struct top_ui *ui, int which)
{
	const char *cur = which == 'g' ? ui->vm_filter : ui->stat_filter;

	ui->input = which;
	snprintf(ui->line, sizeof(ui->line), "%s", cur);
	ui->line_len = strlen(ui->line);
}

/* Keys every view shares; -1 when not one of them. */
static int global_key(struct top_ui *ui, int ch)
{
	switch (ch) {
	case 'q':
	case 'Q':
		return UI_QUIT;
	case 'h':
	case '?':
	case KEY_F(1):
		if (ui->view != V_HELP)
			ui->back = ui->view;
		ui->view = V_HELP;
		return UI_REDRAW;
	case 'p':
	case ' ':
		ui->paused = !ui->paused;
		ui->status[0] = 0;
		return UI_PAUSE | (ui->paused ? 0 : UI_SAMPLE);
	case 'r':
		ui_status(ui, "totals reset");
		return UI_RESET;
	case 'f':
		open_input(ui, 'f');
		return UI_REDRAW;
	case 'g':
		open_input(ui, 'g');
		return UI_REDRAW;
	case 'z':
		ui->o->skip_zero = !ui->o->skip_zero;
		ui_status(ui, "%s",
			  ui->o->skip_zero ? "rows that are all zero are hidden"
					   : "every row is shown");
		return UI_REDRAW;
	case 'c':
		set_filter(ui, 'g', "");
		set_filter(ui, 'f', "");
		return UI_REDRAW;
	case '+':
		if (ui->replay && ui->speed < 64)
			ui->speed *= 2;
		return UI_REDRAW;
	case '-':
		if (ui->replay && ui->speed > 1.0 / 64)
			ui->speed /= 2;
		return UI_REDRAW;
	case KEY_RESIZE:
		return UI_REDRAW;
	}
	return -1;
}

int ui_keys(struct top_ui *ui)
{
	int ch, req = 0;

	while ((ch = getch()) != ERR) {
		int r;

		if (ui->input) {
			req |= input_key(ui, ch);
			continue;
		}
		if (ui->view == V_HELP) {
			req |= ch == KEY_RESIZE ? UI_REDRAW : help_key(ui, ch);
			continue;
		}
		/* A key clears the last message. */
		if (ch != KEY_RESIZE)
			ui->status[0] = 0;
		r = views[ui->view].key(ui, ch);
		if (r < 0)
			r = global_key(ui, ch);
		if (r > 0)
			req |= r;
		req |= UI_REDRAW;
		if (req & UI_QUIT)
			break;
	}
	return req;
}

/* ---- life cycle ------------------------------------------------------- */

struct top_ui *ui_open(struct top_opts *o, struct top_model *m)
{
	struct top_ui *ui = calloc(1, sizeof(*ui));
	const char *cs;

	if (!ui)
		return NULL;
	ui->o = o;
	ui->m = m;
	ui->speed = 1;
	ui->sort_col = 4; /* EXITS/s, busiest first */
	/* Only the character type: numbers in JSON and text keep a dot. */
	setlocale(LC_CTYPE, "");
	cs = nl_langinfo(CODESET);
	ui->utf8 = cs && !strcmp(cs, "UTF-8");
	/* newterm, unlike initscr, returns when the terminal is unusable. */
	ui->screen = newterm(NULL, stdout, stdin);
	if (!ui->screen) {
		free(ui);
		return NULL;
	}
	cbreak();
	noecho();
	nonl();
	keypad(stdscr, TRUE);
	nodelay(stdscr, TRUE);
	set_escdelay(25);
	curs_set(0);
	return ui;
}

void ui_close(struct top_ui *ui)
{
	if (!ui)
		return;
	endwin();
	delscreen(ui->screen);
	if (ui->vm_re_set)
		regfree(&ui->vm_re);
	if (ui->stat_re_set)
		regfree(&ui->stat_re);
	free(ui);
}

bool ui_paused(const struct top_ui *ui)
{
	return ui->paused;
}

void ui_status(struct top_ui *ui, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ui->status, sizeof(ui->status), fmt, ap);
	va_end(ap);
}

void ui_set_title(struct top_ui *ui, const char *title)
{
	snprintf(ui->title, sizeof(ui->title), "%s", title);
}

double ui_speed(const struct top_ui *ui)
{
	return ui->speed;
}

void ui_set_replay(struct top_ui *ui, bool replay)
{
	ui->replay = replay;
}
