// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top: the views of the curses screen, each a body to draw and
 * the keys it handles (struct view_ops): the VM list, one VM's stats, its
 * vCPUs side by side, and the help. top_ui.c frames them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "top_ui.h"

/* ---- the VM list ------------------------------------------------------ */

/* Columns that fit: the least important go first; the name takes what
 * is left, up to 32 cells. */
static int fit_cols(const struct top_model *m, bool *use, int *name_w)
{
	int width = 0, worst;

	for (size_t c = 0; c < top_ncols; c++) {
		use[c] = col_on(m, c);
		if (use[c])
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
			ui_put(y, x, 0, "%-*.*s", w, w, cell);
		else
			ui_put(y, x, 0, "%*.*s", w, w, cell);
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
	/* A column the VMs no longer have sorts no more. */
	if (!col_on(ui->m, ui->sort_col))
		ui->sort_col = col_next(ui->m, ui->sort_col, 1);
	model_sort(ui->m, ui->sort_col, ui->sort_asc);
	n = ui_visible_vms(ui, vis);
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
	fit_cols(ui->m, use, &name_w);
	ui_put(y, 0, A_BOLD, "VMs sorted by %s (%s)%s%s",
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
		ui_put(y + 3, 2, 0, "%s",
		    ui->m->nvms ? "no VM matches the filter ('c' clears it)"
		    : ui->m->frames
			    ? "no VM found" : "reading...");
	if (!n && !ui->m->nvms && ui->m->frames)
		ui_put(y + 4, 2, 0, "%s", demo_hint());
	/* Not "none": another user's VMMs are out of a user's sight. */
	if (!n && !ui->m->nvms && ui->m->frames && !ui->replay && geteuid())
		ui_put(y + 5, 2, 0, "other users' VMMs are hidden from uid %d "
		       "unless it has CAP_SYS_PTRACE", (int)geteuid());
	free(vis);
}

static void select_move(struct top_ui *ui, long delta)
{
	struct top_vm **vis = calloc(ui->m->nvms + 1, sizeof(*vis));
	long n, s;

	if (!vis)
		return;
	n = (long)ui_visible_vms(ui, vis);
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
		ui_open_input(ui, 'g');
		return UI_REDRAW;
	case 's':
	case '>':
		ui->sort_col = col_next(ui->m, ui->sort_col, 1);
		return UI_REDRAW;
	case '<':
		ui->sort_col = col_next(ui->m, ui->sort_col, -1);
		return UI_REDRAW;
	case 'S':
	case 'o':
		ui->sort_asc = !ui->sort_asc;
		return UI_REDRAW;
	}
	/* 1..9 and 0: sort by that column. */
	if (ch >= '0' && ch <= '9') {
		size_t want = ch == '0' ? 9 : (size_t)(ch - '1'), c, n = 0;

		/* (the Nth column on screen) */
		for (c = 0; c < top_ncols; c++)
			if (col_on(ui->m, c) && n++ == want)
				break;
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
	ui_put(y, 0, 0, "%-*.*s %12s %12s %6s", name_w, name_w,
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
	ui_put(y, 4, 0, "%s", text);
	bar_w = COLS - 4 - len - 3;
	if (have && kvmstats_hist__count(st, h))
		ui_hist_bar(ui, y, 4 + len + 2, bar_w > 32 ? 32 : bar_w, st,
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
	char label[160], since[64], id[80] = "", rates[32];
	const struct top_series *s = vm->sum.schema ? &vm->sum : &vm->stats;
	double dt = series_interval_s(s);

	since_text(ui, s, since, sizeof(since));
	if (COLS >= 100)
		snprintf(id, sizeof(id), "  %s", vm->id);
	/* Before its second reading a VM has no interval. */
	if (isnan(dt))
		snprintf(rates, sizeof(rates), "no rates yet");
	else
		snprintf(rates, sizeof(rates), "rates/%.2g s", dt);
	ui_put(y, 0, A_BOLD, "%s  pid %d%s  %s  %zu vCPU%s  %s  %s%s%s",
	    vm_label(vm, label, sizeof(label)), (int)vm->pid, id, vm->source,
	    vm->nvcpus, vm->nvcpus == 1 ? "" : "s", rates,
	    since, vm_unknown(vm) ? "  no counter readable: " : "",
	    vm_unknown(vm) ? vm_unknown(vm) : "");
}

static void vm_draw(struct top_ui *ui, int y, int rows)
{
	struct top_vm *vm = ui_cur_vm(ui);
	struct vm_line lines[512];
	int name_w = name_width();
	char head[256];

	if (!vm)
		return;
	vm_title(ui, y, vm);
	snprintf(head, sizeof(head), "%-*s %12s %12s %6s", name_w, "STAT",
		 "TOTAL", "RATE/s", "%TOTAL");
	ui_bar_line(y + 1, head);
	rows -= 2;
	ui->nlines = vm_lines(ui, vm, lines, 512);
	clamp_scroll(ui, rows);
	for (int r = 0; r < rows && ui->scroll + r < ui->nlines; r++) {
		const struct vm_line *l = &lines[ui->scroll + r];

		if (l->kind == 0 && l->s == &vm->stats)
			ui_put(y + 2 + r, 0, A_BOLD, "VM stats");
		else if (l->kind == 0)
			ui_put(y + 2 + r, 0, A_BOLD,
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
		ui_open_input(ui, 'f');
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
	struct top_vm *vm = ui_cur_vm(ui);
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
	ui_put(y + 1, 0, 0, "%-*s", name_w,
	    vm->nvcpus > (size_t)ncols ? "STAT (Left/Right: more)" : "STAT");
	for (int c = 0; c < ncols && ui->hscroll + c < (int)vm->nvcpus; c++) {
		snprintf(cell, sizeof(cell), "vcpu%d",
			 vm->vcpus[ui->hscroll + c].index);
		ui_put(y + 1, name_w + c * (VCPU_W + 1), 0, " %*s", VCPU_W, cell);
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
		ui_put(y + 2 + r, 0, 0, "%-*.*s", name_w, name_w, name);
		for (int c = 0; c < ncols && ui->hscroll + c < (int)vm->nvcpus;
		     c++) {
			vcpu_cell(&vm->vcpus[ui->hscroll + c], row, cell,
				  sizeof(cell));
			ui_put(y + 2 + r, name_w + c * (VCPU_W + 1), 0, " %*.*s",
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
		ui_put(y + i, 0, i ? 0 : A_BOLD, "%s", help_text[i]);
}

static int help_key(struct top_ui *ui, int ch)
{
	(void)ch;
	ui->view = ui->back;
	return UI_REDRAW;
}

const struct view_ops top_views[V_COUNT] = {
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

