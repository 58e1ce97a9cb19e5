// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top: the curses screen. Views are a table of functions (draw
 * the body, handle a key), as htop's panels are (top_views.c); this file
 * holds the frame around them, the helpers they draw with, the keys
 * every view shares and the screen's life cycle. None of it reads a
 * stats fd: only the model, through the delta helpers.
 *
 * The screen assumes nothing beyond 80x24, no colours (reverse and bold
 * only) and either UTF-8 (block-character histogram bars) or plain ASCII.
 */
#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sanitize.h"
#include "top_ui.h"

/* ---- drawing helpers ------------------------------------------------ */

void ui_put(int y, int x, int attr, const char *fmt, ...)
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

void ui_bar_line(int y, const char *text)
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

void ui_hist_bar(struct top_ui *ui, int y, int x, int width,
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

struct top_vm *ui_cur_vm(const struct top_ui *ui)
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

size_t ui_visible_vms(const struct top_ui *ui, struct top_vm **out)
{
	size_t n = 0;

	for (size_t i = 0; i < ui->m->nvms; i++)
		if (vm_visible(ui, ui->m->vms[i]))
			out[n++] = ui->m->vms[i];
	return n;
}

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
	ui_put(0, 0, A_BOLD, "%s", text);
	if ((int)(strlen(text) + strlen(clock) + 2) < COLS)
		ui_put(0, COLS - (int)strlen(clock), 0, "%s", clock);
}

static void footer(struct top_ui *ui)
{
	const char *what = ui->input == 'g' ? "filter VMs (regex, name or pid)"
					    : "filter stats (regex)";

	move(LINES - 1, 0);
	clrtoeol();
	if (ui->input) {
		ui_put(LINES - 1, 0, 0, "%s: %.*s", what, (int)ui->line_len,
		    ui->line);
		curs_set(1);
		return;
	}
	curs_set(0);
	if (ui->status[0])
		ui_put(LINES - 1, 0, A_BOLD, "%s", ui->status);
	else
		ui_put(LINES - 1, 0, A_REVERSE, "%s", top_views[ui->view].hints);
}

void ui_draw(struct top_ui *ui)
{
	erase();
	if (COLS < 40 || LINES < 8) {
		ui_put(0, 0, 0, "terminal too small (%dx%d)", COLS, LINES);
		refresh();
		return;
	}
	/* A VM that went away takes its view with it. */
	if ((ui->view == V_VM || ui->view == V_VCPU) && !ui_cur_vm(ui)) {
		ui->view = V_LIST;
		ui_status(ui, "the VM has gone");
	}
	header(ui);
	top_views[ui->view].draw(ui, 1, LINES - 2);
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

void ui_open_input(struct top_ui *ui, int which)
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
		ui_open_input(ui, 'f');
		return UI_REDRAW;
	case 'g':
		ui_open_input(ui, 'g');
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
			req |= ch == KEY_RESIZE ? UI_REDRAW : top_views[V_HELP].key(ui, ch);
			continue;
		}
		/* A key clears the last message. */
		if (ch != KEY_RESIZE)
			ui->status[0] = 0;
		r = top_views[ui->view].key(ui, ch);
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
