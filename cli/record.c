// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats record: sample every VM (or those chosen) at an interval into a
 * binary log (kvmstats_log.h), and/or print a vmstat-like text log of
 * rates, as kvm_stat -l/-L does (record_text.c).
 *
 * The loop is: sweep every reader once, hand the readings to the log
 * writer (one writev per sample), print a text line, insert the VMMs the
 * discovery threads opened and every few seconds refresh the host (drop
 * exited VMMs, add hot-added vCPUs, ask for a scan of /proc, which runs
 * on a thread of its own: cli/discover.c), then sleep until the next tick
 * of an absolute schedule (clock_nanosleep(TIMER_ABSTIME)): nothing but
 * the sample itself runs between a tick and its sweep. Signals only set
 * flags: SIGINT/SIGTERM stop after the current sample, SIGHUP reopens the
 * files (for logrotate).
 */
#include <cap-ng.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "discover.h"
#include "kvmstats_log.h"
#include "record_text.h"

enum {
	OPT_ROTATE_SIZE = OPT_CMD_BASE,
	OPT_ROTATE_KEEP,
	OPT_SYNC,
	OPT_REFRESH,
	OPT_KEYFRAME,
};

static volatile sig_atomic_t stop_flag, hup_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void on_hup(int sig)
{
	(void)sig;
	hup_flag = 1;
}

/* Workers that open new VMMs, and how long the first scan waits for them:
 * a VMM that holds its stats fds opens in milliseconds. */
#define DISCOVER_THREADS 4
#define START_WAIT_NS (300 * 1000000ull)

struct choice {
	uint64_t uid;
	bool chosen;
};

struct rec {
	struct cli *cli;
	struct target_args a;
	struct kvmstats_host *host;
	struct discover *disc;		/* opens new VMMs off the sampling */
	struct kvmstats_vmm **sel;	/* chosen VMMs, valid until a sweep */
	size_t nsel;
	struct choice *choice;		/* --name's verdict per VMM uid */
	size_t nchoice;
	size_t verdict_at;		/* where vmm_chosen() looks first */
	struct kvmstats_log_writer *w;
	bool failing;			/* the last sample was not written */
	uint64_t dropped_seen;

	const char *output;
	double interval, duration, refresh;
	long count;
	struct kvmstats_log_writer_opts wo;

	bool log;			/* --log: the text log */
	struct text_log text;
};

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Seconds, as a decimal number; -1 on error (reported). */
static double parse_seconds(struct cli *cli, const char *opt, const char *arg,
			    double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v >= min && v <= max)) {
		cli_err(cli, "%s: '%s' is not a number of seconds in %g..%g", opt,
			arg, min, max);
		return -1;
	}
	return v;
}

/* 64M, 1G, 4096, 512k: bytes, powers of 1024. 0 on error (reported). */
static uint64_t parse_size(struct cli *cli, const char *opt, const char *arg)
{
	char *end;
	double v;
	int shift = 0;

	errno = 0;
	v = strtod(arg, &end);
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	v *= (double)(1ull << shift);
	if (errno || end == arg || *end || !(v >= 4096 && v < 1e18)) {
		cli_err(cli, "%s: '%s' is not a size of at least 4K (e.g. 64M)", opt,
			arg);
		return 0;
	}
	return (uint64_t)v;
}

/* ---- the loop ------------------------------------------------------- */

/* --name's verdict on a VMM at the last choice, or -1 for a new VMM.
 * The host keeps its VMMs in order, so each search starts where the
 * last one ended (*k) and is one step long but for new VMMs. */
static int last_verdict(const struct rec *r, uint64_t uid, size_t *k)
{
	for (size_t n = 0; n < r->nchoice; n++, *k = (*k + 1) % r->nchoice)
		if (r->choice[*k].uid == uid)
			return r->choice[*k].chosen;
	return -1;
}

/* The chosen VMMs, again after every refresh and sweep: a sweep drops
 * the VMMs that exited, and their objects with them. --name is matched
 * once per VMM. */
static int choose(struct rec *r)
{
	size_t n = kvmstats_host__num_vmms(r->host), k = 0;
	struct choice *c;
	void *p;

	p = realloc(r->sel, (n + 1) * sizeof(*r->sel));
	if (p)
		r->sel = p;
	c = malloc((n + 1) * sizeof(*c));
	if (!p || !c) {
		free(c);
		return -ENOMEM;
	}
	r->nsel = 0;
	for (size_t i = 0; i < n; i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(r->host, i);
		uint64_t uid = kvmstats_vmm__uid(v);
		int chosen = last_verdict(r, uid, &k);

		if (chosen < 0)
			chosen = target_selected(&r->a, v);
		c[i] = (struct choice){ uid, chosen };
		if (chosen)
			r->sel[r->nsel++] = v;
	}
	free(r->choice);
	r->choice = c;
	r->nchoice = n;
	return 0;
}

/* The first scan: VMMs asked for by --pid are waited for (and each that
 * cannot be read is said); a host-wide scan waits for those that open
 * at once, and the others are inserted when ready. */
static int refresh(struct rec *r, bool first)
{
	int ret = !r->disc ? kvmstats_host__refresh(r->host) :
		  first || r->a.npids ? discover_refresh(r->disc) :
		  discover_scan(r->disc);

	if (ret < 0) {
		cli_err(r->cli, "scanning the host: %s", strerror(-ret));
		return ret;
	}
	if (first && r->disc) {
		discover_wait(r->disc, START_WAIT_NS);
		discover_collect(r->disc);
	}
	if (first && target_report_errors(r->cli, r->host) && !kvmstats_host__num_vmms(r->host))
		return -ESRCH;
	return choose(r);
}

/* What the sample's commit returned: say when writing fails and when
 * it works again. */
static void sample_written(struct rec *r, int err)
{
	if (err == -EAGAIN)
		return;		/* still failing, not tried again yet */
	if (err) {
		/* The library said why, once per kind of failure. */
		if (!r->failing)
			r->dropped_seen = kvmstats_log_writer__dropped(r->w) - 1;
		r->failing = true;
		return;
	}
	if (r->failing)
		cli_warn(r->cli, "%s: writing again after %llu dropped samples",
			 r->output,
			 (unsigned long long)(kvmstats_log_writer__dropped(r->w) -
					      r->dropped_seen));
	r->failing = false;
}

/* The log of a sweep already taken (with --log, which reads the
 * readers' two last readings). */
static void write_sample(struct rec *r)
{
	int err = kvmstats_log_writer__begin(r->w, kvmstats_host__time_ns(r->host), 0);

	if (err) {
		cli_err(r->cli, "%s: %s", r->output, strerror(-err));
		return;
	}
	/* A target that cannot be added (out of memory) is left out of
	 * this sample; the others are written all the same. */
	for (size_t i = 0; i < r->nsel; i++) {
		err = kvmstats_log_writer__add_vmm(r->w, r->sel[i]);
		if (err)
			cli_warn(r->cli, "%s: pid %d: %s", r->output,
				 (int)kvmstats_vmm__pid(r->sel[i]), strerror(-err));
	}
	sample_written(r, kvmstats_log_writer__commit(r->w));
}

/* sweep_host()'s question, asked after it dropped the VMMs that exited:
 * the last choose()'s verdict, or the rules for a VMM just found. */
static bool vmm_chosen(const struct kvmstats_vmm *v, void *arg)
{
	struct rec *r = arg;
	int chosen = last_verdict(r, kvmstats_vmm__uid(v), &r->verdict_at);

	return chosen < 0 ? target_selected(&r->a, (struct kvmstats_vmm *)v) : chosen;
}

/* Read every reader and write the sample in one pass, the cheap way
 * (kvmstats_log_writer__sweep_host()). */
static void sweep_and_write(struct rec *r)
{
	r->verdict_at = 0;
	sample_written(r, kvmstats_log_writer__sweep_host(r->w, r->host, vmm_chosen, r));
}

static void on_sighup(struct rec *r)
{
	hup_flag = 0;
	if (r->w && kvmstats_log_writer__reopen(r->w) && !r->failing) {
		r->dropped_seen = kvmstats_log_writer__dropped(r->w);
		r->failing = true;
	}
	if (r->text.file)
		text_log_open(&r->text);
}

/* Sleep until @deadline (CLOCK_MONOTONIC ns), reopening the files on
 * SIGHUP on the way; false when asked to stop. */
static bool sleep_until(struct rec *r, uint64_t deadline)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000ull),
			       .tv_nsec = (long)(deadline % 1000000000ull) };

	while (!stop_flag) {
		if (hup_flag)
			on_sighup(r);
		if (!clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
			return true;
	}
	return false;
}

/* How long a sample waits for the QMP and libvirt polls it asked for: a
 * quarter of the interval, at most as long as top --once waits (a poll
 * of QEMU under emulation took over 0.5 s, and the first line then rated
 * one poll against itself). */
#define SETTLE_MAX_NS (3 * 1000000000ull)

static int run(struct rec *r)
{
	uint64_t ival = (uint64_t)(r->interval * 1e9), rfr = (uint64_t)(r->refresh * 1e9);
	uint64_t start = now_ns(CLOCK_MONOTONIC), next = start;
	uint64_t end = r->duration > 0 ? start + (uint64_t)(r->duration * 1e9) : 0;
	uint64_t next_refresh = start + rfr;
	bool had_vmms = kvmstats_host__num_vmms(r->host) > 0;

	for (unsigned long n = 0; !stop_flag; n++) {
		uint64_t now;

		if (hup_flag)
			on_sighup(r);
		now = now_ns(CLOCK_MONOTONIC);
		/* Without --log nothing needs the readers' own readings. */
		if (r->w && !r->log) {
			sweep_and_write(r);
		} else {
			kvmstats_host__sweep(r->host);
			/* QMP and libvirt readings of this sweep, not the last
			 * one's: the first line's rates span the first interval. */
			target_settle(r->host, NULL, now,
				      ival / 4 < SETTLE_MAX_NS ? ival / 4 : SETTLE_MAX_NS);
		}
		if (choose(r))
			return EXIT_FAIL;
		if (r->a.npids && had_vmms && !kvmstats_host__num_vmms(r->host)) {
			cli_warn(r->cli, "every VMM asked for has exited: stopping");
			break;
		}
		if (r->w && r->log)
			write_sample(r);
		if (r->log)
			text_log_line(&r->text, r->sel, r->nsel, now_ns(CLOCK_REALTIME), n);
		if (r->count && (long)n + 1 >= r->count)
			break;
		/* After the sample, in the time until the next one: the
		 * VMMs the workers opened since (sampled from the next tick
		 * on), and the claims of the scanner's last scan. */
		if (r->disc)
			discover_collect(r->disc);
		if (now_ns(CLOCK_MONOTONIC) >= next_refresh) {
			if (refresh(r, false))
				return EXIT_FAIL;
			next_refresh = now_ns(CLOCK_MONOTONIC) + rfr;
		}
		next += ival;
		now = now_ns(CLOCK_MONOTONIC);
		if (next < now)	/* fell behind: skip the ticks missed */
			next = now + (ival ? ival - (now - next) % ival : 0);
		if (end && next >= end)
			break;
		if (ival && !sleep_until(r, next))
			break;
	}
	return EXIT_OK;
}

static void install_signals(void)
{
	struct sigaction sa = { .sa_handler = on_stop };

	/* No SA_RESTART: a signal ends the sleep at once. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_hup;
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static int open_writer(struct rec *r)
{
	char why[512] = "";

	r->wo.sz = sizeof(r->wo);
	r->wo.errbuf = why;
	r->wo.errbuf_sz = sizeof(why);
	r->w = kvmstats_log_writer__open(r->cli->ctx, r->output, &r->wo);
	r->wo.errbuf = NULL;
	if (!r->w) {
		cli_err(r->cli, "%s", why[0] ? why : strerror(errno));
		return -1;
	}
	return 0;
}

/* Does writing in the directory of @path (rotation, a reopen after
 * logrotate) need CAP_DAC_OVERRIDE: is it not ours? */
static bool dir_not_ours(const char *path)
{
	char *copy = path ? strdup(path) : NULL;
	struct stat st;
	bool not_ours;

	if (!path)
		return false;
	not_ours = !copy || stat(dirname(copy), &st) || st.st_uid != geteuid();
	free(copy);
	return not_ours;
}

/*
 * Capabilities. Once the host is scanned and the files are open, record
 * keeps what its refreshes need and nothing else (as serve does):
 * CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, for the fd and attach sources
 * (listing another user's /proc/PID/fd, pidfd_getfd(), ptrace), and
 * CAP_DAC_OVERRIDE only where it is needed: to connect to the QMP socket
 * of another user's QEMU (the qmp source, which auto may pick), and to
 * create files in an output directory that is not ours (rotation, a
 * reopen after logrotate). libvirt's read-only socket and debugfs (as
 * uid 0) need none.
 */
static void drop_caps(struct rec *r)
{
	int keep[3] = { CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE };
	bool qmp = !r->a.source || !strcmp(r->a.source, "auto") ||
		   !strcmp(r->a.source, "qmp") || r->a.qmp;
	bool files = dir_not_ours(r->output) || dir_not_ours(r->text.file);

	if (caps_keep_only(keep, qmp || files ? 3 : 2))
		cli_warn(r->cli, "could not drop capabilities");
}

static int finish(struct rec *r)
{
	uint64_t dropped = 0, samples = 0;
	int ret = EXIT_OK;

	if (r->w) {
		samples = kvmstats_log_writer__samples(r->w);
		dropped = kvmstats_log_writer__dropped(r->w);
		if (kvmstats_log_writer__close(r->w)) {
			cli_err(r->cli, "%s: %s", r->output, strerror(errno));
			ret = EXIT_FAIL;
		}
		r->w = NULL;
		if (dropped) {
			cli_err(r->cli, "%s: %llu of %llu samples could not be written",
				r->output, (unsigned long long)dropped,
				(unsigned long long)samples + dropped);
			ret = EXIT_FAIL;
		}
	}
	if (r->output && !r->log && r->cli->format == OUT_JSON) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "output", json_object_new_string(r->output));
		json_object_object_add(o, "samples", json_object_new_uint64(samples));
		json_object_object_add(o, "dropped", json_object_new_uint64(dropped));
		cli_print_json(r->cli, o);
		json_object_put(o);
	}
	return ret;
}

static void rec_free(struct rec *r)
{
	text_log_free(&r->text);
	free(r->sel);
	free(r->choice);
	kvmstats_log_writer__close(r->w);
	discover_free(r->disc);		/* its workers read the host */
	kvmstats_host__free(r->host);
	target_args_free(&r->a);
}

/* 1: consumed, -1: bad value (reported). */
static int record_opt(struct rec *r, int c, const char *arg)
{
	switch (c) {
	case 'o':
		r->output = arg;
		return 1;
	case 's':
		r->interval = parse_seconds(r->cli, "--interval", arg, 0, 86400);
		if (r->interval > 0 && r->interval < 0.01) {
			cli_err(r->cli, "--interval: at least 0.01 s (or 0: back to back)");
			return -1;
		}
		return r->interval < 0 ? -1 : 1;
	case 'n':
		r->count = cli_parse_long(r->cli, "--count", arg, 1, LONG_MAX);
		return r->count < 0 ? -1 : 1;
	case 'd':
		r->duration = parse_seconds(r->cli, "--duration", arg, 0.001, 1e9);
		return r->duration < 0 ? -1 : 1;
	case OPT_ROTATE_SIZE:
		r->wo.rotate_size = parse_size(r->cli, "--rotate-size", arg);
		return r->wo.rotate_size ? 1 : -1;
	case OPT_ROTATE_KEEP: {
		long v = cli_parse_long(r->cli, "--rotate-keep", arg, 1, 1000);

		r->wo.rotate_keep = (unsigned int)v;
		return v < 0 ? -1 : 1;
	}
	case OPT_KEYFRAME: {
		long v = cli_parse_long(r->cli, "--keyframe", arg, 1, 1000000);

		r->wo.keyframe_interval = (unsigned int)v;
		return v < 0 ? -1 : 1;
	}
	case OPT_SYNC:
		r->wo.flags |= KVMSTATS_LOG_SYNC;
		return 1;
	case OPT_REFRESH:
		r->refresh = parse_seconds(r->cli, "--refresh", arg, 0.1, 86400);
		return r->refresh < 0 ? -1 : 1;
	case 'l':
		r->log = true;
		return 1;
	case 'L':
		r->log = true;
		r->text.file = arg;
		return 1;
	case 'z':
		r->text.skip_zero = true;
		return 1;
	case 'i':
		r->text.past = true;
		return 1;
	case 'f':
		return text_log_fields(&r->text, arg) ? -1 : 1;
	}
	return 0;
}

static int rec_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	struct rec *r = ctx;
	int used = cli_target_opt(cli, &r->a, key, arg);

	if (!used)
		used = record_opt(r, key, arg);
	return used < 0 ? -1 : 0;
}

/* Options of the binary log without one, of the text log without it. */
static int rec_check(struct cli *cli, void *ctx)
{
	const struct rec *r = ctx;
	const struct kvmstats_log_writer_opts *wo = &r->wo;

	if (!r->output && !r->log)
		return cli_bad(cli, "--output FILE or --log is needed");
	if (!r->output && (wo->rotate_size || wo->rotate_keep ||
			   wo->keyframe_interval || wo->flags))
		return cli_bad(cli, "--rotate-size, --rotate-keep, --keyframe "
			       "and --sync go with --output FILE");
	if (wo->rotate_keep && !wo->rotate_size)
		return cli_bad(cli, "--rotate-keep goes with --rotate-size");
	if (!r->log && (r->text.fields_set || r->text.skip_zero || r->text.past))
		return cli_bad(cli, "--fields, --skip-zero and --include-past "
			       "go with --log");
	if (!r->log && cli->format == OUT_CSV)
		return cli_bad(cli, "--csv goes with --log (the --output file "
			       "is a binary log)");
	if (r->log && cli->pretty)
		return cli_bad(cli, "--pretty: the text log is one JSON object "
			       "per line");
	return target_args_check(cli, &r->a, false);
}

static const struct cli_opt record_opts[] = {
	{ "output", 'o', CLI_OPT_SHORT, "FILE", "none",
	  "the binary log (appended to when it is one)" },
	{ "interval", 's', CLI_OPT_SHORT, "SECONDS", "1",
	  "time between samples (at least 0.01; 0: back to back)" },
	{ "count", 'n', CLI_OPT_SHORT, "N", "until stopped",
	  "stop after N samples" },
	{ "duration", 'd', CLI_OPT_SHORT, "SECONDS", "until stopped",
	  "stop after this long" },
	{ "rotate-size", OPT_ROTATE_SIZE, 0, "SIZE", "never",
	  "start a new file past SIZE bytes (suffix K, M or G)" },
	{ "rotate-keep", OPT_ROTATE_KEEP, 0, "N", "1",
	  "old files kept by rotation" },
	{ "keyframe", OPT_KEYFRAME, 0, "N", "256",
	  "a whole data block every N samples, only changes between" },
	{ "sync", OPT_SYNC, 0, NULL, NULL,
	  "fdatasync(2) after every sample" },
	{ "refresh", OPT_REFRESH, 0, "SECONDS", "2",
	  "how often to look for new VMMs and vCPUs" },
	{ "log", 'l', CLI_OPT_SHORT, NULL, NULL,
	  "print a text log of rates on standard output (kvm_stat -l)" },
	{ "log-file", 'L', CLI_OPT_SHORT, "FILE", "standard output",
	  "append the text log to FILE (implies --log)" },
	{ "fields", 'f', CLI_OPT_SHORT, "REGEX", "every stat",
	  "with --log: only the stats whose names match" },
	{ "skip-zero", 'z', CLI_OPT_SHORT, NULL, NULL,
	  "with --log: leave out the stats that never counted" },
	{ "include-past", 'i', CLI_OPT_SHORT, NULL, NULL,
	  "with --log: totals since each VM started, not rates" },
	CLI_OPTS_TARGET,
	{ "json", 'j', CLI_OPT_SHORT | CLI_OPT_JSON, NULL, NULL,
	  "with --log: a JSON object per line; else a summary at the end" },
	{ "csv", 'C', CLI_OPT_CSV, NULL, NULL,
	  "with --log: CSV rows (RFC 4180), the time first" },
	{ 0 },
};

static const struct cli_spec record_spec = {
	.cmd = "record",
	.outputs = CLI_OUT_JSON | CLI_OUT_CSV,
	.text = "a text log",
	.about = "Sample every VM (or those chosen) into a binary log for "
		 "'kvmstats replay' and\n'top --replay', and/or print a "
		 "text log of rates as kvm_stat -l does.\nSIGINT and SIGTERM "
		 "stop it after the current sample; SIGHUP reopens files.",
	.opts = record_opts,
	.opt = rec_opt,
	.check = rec_check,
};

int cmd_record(struct cli *cli, int argc, char **argv)
{
	struct rec r = { .cli = cli, .interval = 1, .refresh = 2, .text.cli = cli };
	int ret;

	if (target_args_init(&r.a, argc))
		return EXIT_FAIL;
	ret = cli_parse(cli, &record_spec, &r, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	ret = EXIT_FAIL;
	r.host = target_host_new(cli, &r.a);
	/* VMMs asked for by --pid are opened at once, as the user waits
	 * for them; any others, on workers started once the capabilities
	 * are dropped (capabilities are per thread). */
	if (!r.host || (r.a.npids && refresh(&r, true)))
		goto out;
	if ((r.log && text_log_open(&r.text)) || (r.output && open_writer(&r)))
		goto out;
	drop_caps(&r);
	r.disc = discover_new(r.host, DISCOVER_THREADS);
	if (!r.disc) {
		cli_err(cli, "cannot start: %s", strerror(errno));
		goto out;
	}
	if (!r.a.npids && refresh(&r, true))
		goto out;
	if (!r.nsel && !r.a.npids)
		target_warn_hidden(cli);	/* other users' VMMs */
	if (!r.nsel)
		cli_warn(cli, "no VM to record yet; VMs that start will be picked up");
	install_signals();
	ret = run(&r);
	if (finish(&r) != EXIT_OK)
		ret = EXIT_FAIL;
out:
	rec_free(&r);
	return ret;
}
