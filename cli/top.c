// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top: the live view (the default command), kvm_stat's screen on
 * the binary stats interface.
 *
 * This file holds the command and the two sources of frames: the live
 * host (refreshed every few seconds, swept every interval) and a log
 * written by `kvmstats record` (--replay). Both feed the same model
 * (top_model.c); the renderers are the curses views (top_ui.c) and the
 * plain text and JSON of --once (top_text.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "discover.h"
#include "kvmstats_log.h"
#include "top.h"

/* A VMM list rescan walks /proc; a sweep is one pread per fd. */
#define REFRESH_NS (3 * 1000000000ull)
/* --once waits at most this long for a QMP or libvirt poll to answer
 * (their own deadlines are shorter): its two readings are then one
 * --interval apart whatever the source. */
#define SETTLE_NS (3 * 1000000000ull)
/* Workers that open new VMMs, and how long the first scan waits for them
 * (a VMM that holds its stats fds opens in milliseconds). */
#define DISCOVER_THREADS 4
#define START_WAIT_NS (300 * 1000000ull)

enum { OPT_REPLAY = OPT_CMD_BASE, OPT_LOOP };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- sources of frames ---------------------------------------------- */

struct top_src {
	const struct top_src_ops *ops;
	struct cli *cli;
	const struct top_opts *o;
	const struct target_args *args;
	struct kvmstats_host *host;
	uint64_t next_refresh;
	struct discover *disc;	/* opens new VMMs off the frames */
	struct kvmstats_log_reader *log;
	uint64_t last_fed; /* log time of the last frame fed */
	bool fed;
	bool looped; /* --loop started the log again */
	bool settle; /* --once: readings taken after each sweep */
	char msg[512]; /* what went wrong at the last frame, if anything */
};

struct top_src_ops {
	const char *name;
	/* Feed one frame into @m: 1 fed, 0 no more frames (end of a log),
	 * or a negative errno (the reason in src->msg). */
	int (*frame)(struct top_src *src, struct top_model *m);
};

static void set_msg(struct top_src *src, const char *text)
{
	size_t n = strcspn(text, "\n");

	snprintf(src->msg, sizeof(src->msg), "%.*s", (int)n, text);
}

/* The first scan: VMMs asked for by --pid are waited for; a host-wide
 * one waits for those that open at once. Then new VMMs are opened on
 * workers (discover.c) and come in when ready: a VMM whose monitor never
 * answers holds no frame up. */
static int first_scan(struct top_src *src)
{
	int n = 0;

	if (src->args->npids)
		n = kvmstats_host__refresh(src->host);
	src->disc = discover_new(src->host, DISCOVER_THREADS);
	if (!src->disc)
		return -errno;
	if (src->args->npids)
		return n;
	n = discover_refresh(src->disc);
	discover_wait(src->disc, START_WAIT_NS);
	discover_collect(src->disc);
	return n;
}

static void live_refresh(struct top_src *src, uint64_t now)
{
	int n;

	if (src->disc)
		discover_collect(src->disc);
	if (now < src->next_refresh)
		return;
	src->next_refresh = now + REFRESH_NS;
	/* After the first, /proc is scanned on the scanner's thread: a
	 * frame waits for no scan. --pid VMMs need none. */
	n = !src->disc ? first_scan(src) :
	    src->args->npids ? discover_refresh(src->disc) :
	    discover_scan(src->disc);
	src->msg[0] = 0;
	if (n < 0)
		snprintf(src->msg, sizeof(src->msg), "scanning the host: %s",
			 strerror(-n));
	else
		set_msg(src, kvmstats_host__errors(src->host));
}

/* Each reading is fed at its own time: a QMP or libvirt snapshot is
 * older than the sweep, a debugfs one took a while. */
static void live_vm(struct top_model *m, struct kvmstats_vmm *v, size_t j)
{
	struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
	struct kvmstats_reader *r = kvmstats_vm__reader(vm);
	struct top_vm *tv = model_vm(m, kvmstats_vmm__uid(v), (int)j);
	const struct kvmstats_sample *smp;

	if (!tv)
		return;
	if (!tv->id[0]) {
		tv->pid = kvmstats_vmm__pid(v);
		snprintf(tv->name, sizeof(tv->name), "%s",
			 kvmstats_vmm__name(v));
		snprintf(tv->source, sizeof(tv->source), "%s",
			 kvmstats_vmm__source(v));
		snprintf(tv->id, sizeof(tv->id), "%s",
			 r ? kvmstats_reader__id(r) : "-");
	}
	/* A failed read keeps the previous reading: the next frame's rate
	 * spans both intervals and stays right. */
	smp = r ? kvmstats_reader__cur(r) : NULL;
	if (smp && !kvmstats_reader__error(r) &&
	    !series_feed(m, &tv->stats, kvmstats_reader__schema(r),
			 smp->data, smp->time_ns, false))
		series_missing(&tv->stats, kvmstats_reader__missing(r));
	for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
		struct top_series *s;
		int index;

		r = kvmstats_vm__vcpu(vm, k, &index);
		smp = r ? kvmstats_reader__cur(r) : NULL;
		if (!smp || kvmstats_reader__error(r))
			continue;
		s = model_vcpu(tv, index);
		if (s && !series_feed(m, s, kvmstats_reader__schema(r),
				      smp->data, smp->time_ns, false))
			series_missing(s, kvmstats_reader__missing(r));
	}
}

static int live_frame(struct top_src *src, struct top_model *m)
{
	uint64_t t = now_ns();

	live_refresh(src, t);
	kvmstats_host__sweep(src->host);
	if (src->settle)
		target_settle(src->host, src->args, t, SETTLE_NS);
	t = kvmstats_host__time_ns(src->host);
	model_begin(m);
	for (size_t i = 0; i < kvmstats_host__num_vmms(src->host); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(src->host, i);

		if (!target_selected(src->args, v))
			continue;
		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++)
			live_vm(m, v, j);
	}
	model_end(m, t);
	return 1;
}

static const struct top_src_ops live_ops = {"live", live_frame};

static void replay_entry(struct top_src *src, struct top_model *m,
			 const struct kvmstats_log_entry *e, uint64_t t,
			 bool restart)
{
	const struct kvmstats_log_target *tg = e->target;
	struct top_series *s;
	struct top_vm *vm;

	if (src->args->npids) {
		bool want = false;

		for (size_t i = 0; i < src->args->npids; i++)
			want |= src->args->pids[i] == tg->pid;
		if (!want)
			return;
	}
	if (src->args->name_set &&
	    regexec(&src->args->name_re, tg->name ? tg->name : "", 0, NULL, 0))
		return;
	vm = model_vm(m, tg->uid, tg->vm);
	if (!vm)
		return;
	if (!vm->id[0]) {
		vm->pid = tg->pid;
		snprintf(vm->name, sizeof(vm->name), "%s",
			 tg->name ? tg->name : "");
		snprintf(vm->source, sizeof(vm->source), "%s",
			 tg->source ? tg->source : "");
		snprintf(vm->id, sizeof(vm->id), "%s", tg->id ? tg->id : "-");
	}
	if (e->error < 0 || !e->data || !e->schema)
		return;
	s = tg->vcpu < 0 ? &vm->stats : model_vcpu(vm, tg->vcpu);
	if (s && !series_feed(m, s, e->schema, e->data, t, restart))
		series_missing(s, e->missing);
}

/* Frames are recorded samples at least one interval apart (recorded
 * time): rates over a longer span need no sample in between. */
static int replay_frame(struct top_src *src, struct top_model *m)
{
	uint64_t step = (uint64_t)(src->o->interval * 1e9);

	for (;;) {
		int n = kvmstats_log_reader__next(src->log);
		bool restart;
		uint64_t t;

		/* --loop: again from the start, every series restarted. */
		if (n == 0 && src->o->loop && src->fed &&
		    !kvmstats_log_reader__rewind(src->log)) {
			src->fed = false;
			src->looped = true;
			continue;
		}
		if (n <= 0) {
			if (n < 0)
				snprintf(src->msg, sizeof(src->msg),
					 "reading the log: %s", log_strerror(n));
			return n;
		}
		t = kvmstats_log_reader__time_ns(src->log);
		restart = kvmstats_log_reader__session_start(src->log) ||
			  !src->fed;
		if (src->fed && !restart && t < src->last_fed + step)
			continue;
		model_begin(m);
		for (size_t i = 0;
		     i < kvmstats_log_reader__num_entries(src->log); i++)
			replay_entry(src, m,
				     kvmstats_log_reader__entry(src->log, i), t,
				     restart);
		model_end(m, t);
		m->wall_ns = kvmstats_log_reader__realtime_ns(src->log);
		src->last_fed = t;
		src->fed = true;
		return 1;
	}
}

static const struct top_src_ops replay_ops = {"replay", replay_frame};

static int src_open(struct top_src *src, struct cli *cli,
		    const struct top_opts *o, const struct target_args *a)
{
	char why[256] = "";

	memset(src, 0, sizeof(*src));
	src->cli = cli;
	src->o = o;
	src->args = a;
	if (!o->replay) {
		src->ops = &live_ops;
		src->host = target_host_new(cli, a);
		return src->host ? 0 : -1;
	}
	src->ops = &replay_ops;
	src->log = kvmstats_log_reader__open(
		cli->ctx, o->replay,
		&(struct kvmstats_log_reader_opts){
			.sz = sizeof(struct kvmstats_log_reader_opts),
			.errbuf = why,
			.errbuf_sz = sizeof(why)});
	if (!src->log) {
		size_t n = strlen(o->replay);

		/* The reader's reason may name the file already. */
		if (!strncmp(why, o->replay, n) && why[n] == ':')
			cli_err(cli, "%s", why);
		else
			cli_err(cli, "%s: %s", o->replay,
				why[0] ? why : strerror(errno));
		return -1;
	}
	return 0;
}

static void src_close(struct top_src *src)
{
	discover_free(src->disc);	/* its workers read the host */
	kvmstats_host__free(src->host);
	kvmstats_log_reader__close(src->log);
	memset(src, 0, sizeof(*src));
}

/* ---- --once: two frames one interval apart, printed ------------------ */

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int run_once(struct cli *cli, const struct top_opts *o,
		    struct top_src *src, struct top_model *m)
{
	int n;

	src->settle = true;
	if (src->ops == &live_ops && !src->args->npids)
		target_warn_hidden(cli);	/* other users' VMMs */
	n = src->ops->frame(src, m);
	if (n > 0 && src->ops == &live_ops) {
		/* Pids asked for that no source serves are an error. */
		if (target_report_errors(cli, src->host) && !m->nvms)
			return EXIT_FAIL;
		sleep_s(o->interval);
	}
	if (n > 0)
		n = src->ops->frame(src, m);
	if (n < 0) {
		cli_err(cli, "%s", src->msg);
		return EXIT_FAIL;
	}
	model_sort(m, 4, false);
	if (cli->format == OUT_JSON)
		return top_print_json(cli, o, m);
	return top_print_text(o, m);
}

/* ---- the live screen ---------------------------------------------- */

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
	stop_sig = sig;
}

/* Installed before curses starts, so that ncurses keeps its hands off
 * them and a SIGTERM ends the loop cleanly (the demo's guests are
 * stopped by our caller). No SA_RESTART: poll() must return. */
static void catch_signals(struct sigaction *old)
{
	struct sigaction sa = {.sa_handler = on_stop};
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
}

static void restore_signals(const struct sigaction *old)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

	for (size_t i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
}

/*
 * While curses owns the terminal, anything written to stderr (the
 * library's warnings through main's log callback, a lost VMM) would
 * scribble over the screen: it goes to a memory file instead, its last
 * line is shown in the status bar, and it is all printed after the
 * screen is restored.
 */
struct err_capture {
	int saved; /* the real stderr */
	int mem;
	off_t shown;
};

static void capture_begin(struct err_capture *c)
{
	c->saved = -1;
	c->shown = 0;
	c->mem = memfd_create("kvmstats-top-stderr", MFD_CLOEXEC);
	if (c->mem < 0)
		return;
	fflush(stderr);
	c->saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (c->saved < 0 || dup2(c->mem, STDERR_FILENO) < 0) {
		close(c->mem);
		c->mem = -1;
	}
}

static void capture_poll(struct err_capture *c, struct top_ui *ui)
{
	char buf[512];
	off_t end;
	ssize_t n;
	char *line;

	if (c->mem < 0)
		return;
	fflush(stderr);
	end = lseek(c->mem, 0, SEEK_END);
	if (end <= c->shown)
		return;
	n = pread(c->mem, buf, sizeof(buf) - 1,
		  end - c->shown > (off_t)sizeof(buf) - 1
			  ? end - (off_t)sizeof(buf) + 1
			  : c->shown);
	c->shown = end;
	if (n <= 0)
		return;
	buf[n] = 0;
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	line = strrchr(buf, '\n');
	ui_status(ui, "%s", line ? line + 1 : buf);
}

static void capture_end(struct err_capture *c)
{
	char buf[4096];
	off_t end;
	ssize_t n;

	if (c->mem < 0)
		return;
	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	/* The tail is what matters; a long run may have said a lot. */
	end = lseek(c->mem, 0, SEEK_END);
	n = pread(c->mem, buf, sizeof(buf),
		  end > (off_t)sizeof(buf) ? end - (off_t)sizeof(buf) : 0);
	if (n > 0)	/* stderr itself failing leaves nowhere to say so */
		(void)!write(STDERR_FILENO, buf, (size_t)n);
	close(c->mem);
	c->mem = -1;
}

static uint64_t next_due(const struct top_opts *o, const struct top_model *m,
			 struct top_ui *ui, uint64_t now)
{
	double gap = o->interval;

	/* A log plays at its recorded pace, scaled by the chosen speed. */
	if (o->replay) {
		if (m->frames > 1 && m->t_cur > m->t_prev)
			gap = (double)(m->t_cur - m->t_prev) / 1e9;
		gap /= ui_speed(ui);
		gap = gap < 0.01 ? 0.01 : gap > 10 ? 10 : gap;
	}
	return now + (uint64_t)(gap * 1e9);
}

static int run_screen(struct cli *cli, struct top_opts *o, struct top_src *src,
		      struct top_model *m)
{
	struct sigaction old[3];
	struct err_capture cap;
	struct top_ui *ui;
	uint64_t due = 0;
	bool ended = false;
	int req = 0;

	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		cli_err(cli, "top needs a terminal; use 'top --once' for plain "
			     "text");
		return EXIT_FAIL;
	}
	catch_signals(old);
	capture_begin(&cap);
	ui = ui_open(o, m);
	if (!ui) {
		capture_end(&cap);
		restore_signals(old);
		cli_err(cli, "cannot start the screen (TERM=%s)",
			getenv("TERM") ? getenv("TERM") : "");
		return EXIT_FAIL;
	}
	ui_set_replay(ui, o->replay != NULL);
	if (o->replay)
		ui_set_title(ui, o->banner ? o->banner->title : o->replay);
	if (o->banner)
		ui_status(ui, "%s", o->banner->notice);
	while (!stop_sig && !(req & UI_QUIT)) {
		uint64_t now = now_ns();
		struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
		int wait_ms = -1;

		if (!ended && !ui_paused(ui) && now >= due) {
			int n = src->ops->frame(src, m);

			if (src->msg[0])
				ui_status(ui, "%s", src->msg);
			if (src->looped && o->banner)
				ui_status(ui, "%s", o->banner->notice);
			src->looped = false;
			/* Only a log ends; what it showed last stays. */
			if (n <= 0)
				ended = true;
			if (n == 0)
				ui_status(ui, "end of the log: 'q' quits");
			due = next_due(o, m, ui, now);
			capture_poll(&cap, ui);
			ui_draw(ui);
		}
		if (!ended && !ui_paused(ui)) {
			now = now_ns();
			wait_ms = due > now ? (int)((due - now) / 1000000) + 1
					    : 0;
		}
		poll(&pfd, 1, wait_ms);
		req = ui_keys(ui);
		if (req & UI_RESET)
			model_reset(m);
		if (req & UI_SAMPLE)
			due = 0;
		if (req & (UI_RESET | UI_REDRAW | UI_PAUSE))
			ui_draw(ui);
	}
	ui_close(ui);
	capture_end(&cap);
	restore_signals(old);
	stop_sig = 0;
	return EXIT_OK;
}

/* ---- the command ---------------------------------------------------- */

static int parse_interval(struct cli *cli, const char *arg, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v >= 0.01 && v <= 3600)) {
		cli_err(cli,
			"--interval: '%s' is not a number of seconds in "
			"0.01..3600",
			arg);
		return -1;
	}
	*out = v;
	return 0;
}

struct top_args {
	struct top_opts o;
	struct target_args a;
};

static int top_opt(struct cli *cli, void *ctx, int c, const char *arg)
{
	struct top_args *t = ctx;
	struct top_opts *o = &t->o;
	int used = cli_target_opt(cli, &t->a, c, arg);

	if (used)
		return used < 0 ? -1 : 0;
	switch (c) {
	case '1':
		o->once = true;
		break;
	case 's':
		return parse_interval(cli, arg, &o->interval);
	case 'f':
		if (cli_parse_regex(cli, "--fields", arg, &o->fields, &o->fields_set))
			return -1;
		break;
	case 'z':
		o->skip_zero = true;
		break;
	case 'i':
		o->include_past = true;
		break;
	case OPT_REPLAY:
		o->replay = arg;
		break;
	case OPT_LOOP:
		o->loop = true;
		break;
	}
	return 0;
}

static int top_check(struct cli *cli, void *ctx)
{
	struct top_args *t = ctx;
	const struct target_args *a = &t->a;

	if (t->o.loop && !t->o.replay)
		return cli_bad(cli, "--loop goes with --replay FILE");
	if (t->o.loop && t->o.once)
		return cli_bad(cli, "--loop and --once: --once reads two "
			       "samples and ends");
	if (cli->format == OUT_JSON && !t->o.once)
		return cli_bad(cli, "--json goes with --once (or see 'record "
			       "--log --json')");
	/* A log is read as it was recorded: --pid and --name choose in it,
	 * nothing chooses how. */
	if (t->o.replay && (a->source || a->flags || a->qmp || a->libvirt_uri ||
			    a->timeout_ms))
		return cli_bad(cli, "--replay reads a log: --source, --attach, "
			       "--force, --qmp, --libvirt-uri and --qmp-timeout "
			       "read live VMs");
	return target_args_check(cli, a, false);
}

static const struct cli_opt top_opts[] = {
	{ "once", '1', CLI_OPT_SHORT, NULL, NULL,
	  "two readings one interval apart, printed as text (or --json)" },
	{ "interval", 's', CLI_OPT_SHORT, "SECONDS", "1",
	  "time between readings, 0.01 to 3600" },
	{ "fields", 'f', CLI_OPT_SHORT, "REGEX", "every stat",
	  "only the stats whose names match" },
	{ "skip-zero", 'z', CLI_OPT_SHORT, NULL, NULL,
	  "hide the stats that are zero in every column" },
	{ "include-past", 'i', CLI_OPT_SHORT, NULL, NULL,
	  "totals from the start of each VM, not from the first reading" },
	{ "replay", OPT_REPLAY, 0, "FILE", "live VMs",
	  "play a log written by 'kvmstats record' in the same views" },
	{ "loop", OPT_LOOP, 0, NULL, NULL,
	  "with --replay: start the log again at its end" },
	CLI_OPT_PID("only this VMM process (repeatable; in a log too)"),
	CLI_OPT_NAME("only VMMs whose name matches (in a log too)"),
	CLI_OPTS_SOURCE,
	{ 0 },
};

static const struct cli_spec top_spec = {
	.cmd = "top",
	.outputs = CLI_OUT_JSON,
	.text = "a screen (text with --once)",
	.about = "A live view of every VM's stats, as kvm_stat's: the VM list, "
		 "a VM's stats with\nrates and histogram percentiles, its "
		 "vCPUs side by side. Needs a terminal\nbut with --once.",
	.opts = top_opts,
	.opt = top_opt,
	.check = top_check,
};

int cmd_top(struct cli *cli, int argc, char **argv)
{
	return top_main(cli, argc, argv, NULL);
}

int top_main(struct cli *cli, int argc, char **argv,
	     const struct top_banner *banner)
{
	struct top_args t = { .o = { .interval = 1.0 } };
	struct top_opts *o = &t.o;
	struct top_model m;
	struct top_src src;
	int ret;

	if (target_args_init(&t.a, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &top_spec, &t, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	o->banner = banner;
	ret = EXIT_FAIL;
	if (src_open(&src, cli, o, &t.a))
		goto out;
	model_init(&m, o->include_past);
	if (o->once)
		ret = run_once(cli, o, &src, &m);
	else
		ret = run_screen(cli, o, &src, &m);
	model_free(&m);
	src_close(&src);
out:
	if (o->fields_set)
		regfree(&o->fields);
	target_args_free(&t.a);
	return ret;
}
