/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The kvmstats command line: shared pieces of the subcommands. */
#ifndef KVMSTATS_CLI_H
#define KVMSTATS_CLI_H

#include <getopt.h>
#include <json-c/json.h>
#include <regex.h>
#include <stdio.h>

#include "kvmstats.h"

/* Exit codes (documented in kvmstats(1)). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,	/* runtime failure, or `check` found a violation */
	EXIT_USAGE = 2,
};

enum out_format {
	OUT_TABLE,
	OUT_JSON,
	OUT_CSV,
};

/* Options every subcommand understands. */
struct cli {
	const char *prog;
	const char *cmd;	/* the command running: errors name it */
	/* The argv being parsed (cli_parse()), for options that take
	 * several operands (--file A B). */
	int argc;
	char **argv;
	enum out_format format;
	bool pretty;
	int verbose;
	unsigned int given;	/* CLI_GIVEN_*: the common options seen */
	struct kvmstats_ctx *ctx;
};

struct cmd {
	const char *name;
	int (*fn)(struct cli *cli, int argc, char **argv);
	const char *summary;
};

/* Errors go to stderr as "kvmstats: CMD: ..." whatever the output format,
 * so that a JSON stream on stdout stays parseable. */
void cli_err(const struct cli *cli, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void cli_warn(const struct cli *cli, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A usage error, reported: returns EXIT_USAGE. */
int cli_bad(const struct cli *cli, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parse a positive integer argument; -1 on error (already reported). */
long cli_parse_long(const struct cli *cli, const char *opt, const char *arg,
		    long min, long max);
/* An option's extended regular expression, into @re (the one it held,
 * when *@set, freed first); *@set says whether @re holds one. -1 on
 * error (already reported). */
int cli_parse_regex(const struct cli *cli, const char *opt, const char *arg,
		    regex_t *re, bool *set);
/* --pid PID[,PID...]: append each to *@pids (grown as needed; *@cap is
 * its size). -1 after an error message. */
int cli_add_pids(const struct cli *cli, const char *arg, pid_t **pids,
		 size_t *n, size_t *cap);

void cli_print_json(const struct cli *cli, struct json_object *o);
/* A double as JSON in the fewest digits that read back exactly; NULL
 * (JSON null) for a NaN or an infinity, never a made-up number. */
struct json_object *cli_json_double(double v);

/* ---- options: one table per command (opts.c) ------------------------ */

/*
 * An option as getopt, --help (text and JSON), the man page and the bash
 * completion know it. A command's table lists its own options; the
 * common ones (--json, --csv, --pretty, -v, -q, -h) are added to every
 * table, before or after the command alike, and shown by --help where
 * the command has that output.
 */
struct cli_opt {
	const char *name;	/* long name without "--"; NULL ends a table */
	int key;		/* what the handler gets: a letter, or OPT_* */
	unsigned int flags;	/* CLI_OPT_* */
	const char *arg;	/* its argument's name; NULL: it takes none */
	const char *def;	/* the default of an option with an argument */
	const char *help;	/* one line */
};

enum {
	CLI_OPT_SHORT = 1u << 0,	/* -KEY is the same option */
	CLI_OPT_ALIAS = 1u << 1,	/* another name of the entry above */
	CLI_OPT_JSON = 1u << 2,		/* shown where the command has JSON */
	CLI_OPT_CSV = 1u << 3,		/* shown where it has CSV */
};

/* Outputs a command has besides text. */
enum {
	CLI_OUT_JSON = 1u << 0,
	CLI_OUT_CSV = 1u << 1,
};

/* Common options seen (cli->given), for their conflicts. */
enum {
	CLI_GIVEN_JSON = 1u << 0,
	CLI_GIVEN_CSV = 1u << 1,
	CLI_GIVEN_PRETTY = 1u << 2,
	CLI_GIVEN_VERBOSE = 1u << 3,
	CLI_GIVEN_QUIET = 1u << 4,
	CLI_GIVEN_HELP = 1u << 5,
};

struct cli_spec {
	const char *cmd;
	const char *operands;	/* after [OPTIONS] in the synopsis */
	unsigned int min_operands, max_operands;
	unsigned int outputs;	/* CLI_OUT_* */
	const char *text;	/* what the text output is: "a table" */
	const char *about;	/* what the command does, for --help */
	const char *page;	/* its man page: NULL for kvmstats-CMD(1) */
	const struct cli_opt *opts;	/* the command's own */
	/* One of the table's options: 0, or -1 after reporting a bad value. */
	int (*opt)(struct cli *cli, void *ctx, int key, const char *arg);
	/* After parsing: options that conflict. 0, or EXIT_USAGE (reported). */
	int (*check)(struct cli *cli, void *ctx);
	/* The global level (cmd NULL): its commands, for --help. */
	const struct cmd *cmds;
	size_t ncmds;
};

/* cli_parse()'s "go on": anything else is the command's exit status
 * (EXIT_OK after --help, EXIT_USAGE after a usage error, reported). */
#define CLI_PARSED (-1)
/* Parse a command's argv (argv[0] its name) from the start; operands are
 * then argv[optind..argc). With @spec's cmd NULL, the global options:
 * parsing stops at the command, argv[optind]. */
int cli_parse(struct cli *cli, const struct cli_spec *spec, void *ctx,
	      int argc, char **argv);

/* ---- targets: what a command reads --------------------------------- */

/* Long-only options share these codes in every command. */
enum {
	OPT_FILE = 0x100,
	OPT_SOURCE,
	OPT_ATTACH,
	OPT_FORCE,
	OPT_QMP,
	OPT_LIBVIRT_URI,
	OPT_SOURCE_TIMEOUT,
	OPT_CMD_BASE = 0x200,	/* a command's own long-only options */
};

/* The options that choose VMs, the same in every command (kvm_stat's
 * -p/--pid and -g/--guest among them): entries of a command's table. */
#define CLI_OPT_PID(help)                                                      \
	{ "pid", 'p', CLI_OPT_SHORT, "PID[,PID...]", "every VMM", help }
#define CLI_OPT_NAME(help)                                                     \
	{ "name", 'g', CLI_OPT_SHORT, "REGEX", "every name", help },           \
	{ "guest", 'g', CLI_OPT_ALIAS, "REGEX", NULL, NULL }
#define CLI_OPT_FILE(help)                                                     \
	{ "file", OPT_FILE, 0, "IMAGE...", "none", help }
#define CLI_OPT_LIBVIRT_URI(help)                                              \
	{ "libvirt-uri", OPT_LIBVIRT_URI, 0, "URI", "qemu:///system", help }
/* A VMM's monitor may be slow or hung: each exchange is bounded. */
#define CLI_OPT_QMP_TIMEOUT                                                    \
	{ "qmp-timeout", OPT_SOURCE_TIMEOUT, 0, "MS", "1000",                  \
	  "one exchange with a VMM's monitor (QMP, or libvirt's) takes at most this" }
/* How VMMs are read. */
#define CLI_OPTS_SOURCE                                                        \
	{ "source", OPT_SOURCE, 0, "SOURCE", "auto",                          \
	  "read through this source only: fd, attach, qmp, libvirt, debugfs" }, \
	{ "attach", OPT_ATTACH, 0, NULL, NULL,                                 \
	  "allow the attach source (ptrace: see kvmstats(1))" },              \
	{ "force", OPT_FORCE, 0, NULL, NULL,                                   \
	  "with --attach: attach to a VMM under seccomp too" },               \
	{ "qmp", OPT_QMP, 0, "PATH", "from QEMU's command line",               \
	  "the QMP socket of the one --pid given" },                          \
	CLI_OPT_LIBVIRT_URI("the libvirt connection to ask"),                  \
	CLI_OPT_QMP_TIMEOUT
/* Live VMMs: every target option but --file. */
#define CLI_OPTS_TARGET                                                        \
	CLI_OPT_PID("only this VMM process (repeatable)"),                     \
	CLI_OPT_NAME("only VMMs whose name matches (QEMU's -name, else the "   \
		     "process name)"),                                         \
	CLI_OPTS_SOURCE

struct target_args {
	pid_t *pids;
	size_t npids, pids_cap;
	char **files;
	size_t nfiles;
	const char *source;
	unsigned int flags;
	const char *qmp;
	const char *libvirt_uri;
	unsigned int timeout_ms;	/* --qmp-timeout; 0: the library's */
	regex_t name_re;
	bool name_set;
};

int target_args_init(struct target_args *a, int argc);
void target_args_free(struct target_args *a);
/* The operands after an option's argument, up to the next option
 * (`--file A B`): stored in @out, optind moved past them; a count. */
size_t cli_more_operands(struct cli *cli, const char *arg, char **out);
/* 1: @c was a target option (consumed), 0: not one, -1: bad value. */
int cli_target_opt(struct cli *cli, struct target_args *a, int c,
		   const char *arg);
/* Target options that conflict (--force without --attach, --attach with
 * another --source...): 0 or EXIT_USAGE (reported). --qmp also names the
 * monitor that tells guest RAM when @qmp_ram. */
int target_args_check(struct cli *cli, const struct target_args *a,
		      bool qmp_ram);
/* Was an option that chooses VMMs given (not --file)? */
bool target_args_host(const struct target_args *a);
/* A host object for these options (not refreshed yet). */
struct kvmstats_host *target_host_new(struct cli *cli,
				      const struct target_args *a);
/* Does --name match this VMM? */
bool target_selected(const struct target_args *a, struct kvmstats_vmm *v);
/* Print the host's open errors (VMMs asked for by pid); returns count. */
int target_report_errors(struct cli *cli, struct kvmstats_host *h);
/* Processes of other users whose fds we may not look at, so that a VMM
 * among them is invisible; vmms: how many of those are known VMMs. */
struct target_hidden {
	int procs, vmms;
};
int target_hidden(struct target_hidden *out);
/* Is @pid a process whose fds we may not look at? */
bool target_pid_hidden(pid_t pid);
/* Warn (stderr) that other users' VMMs are hidden, if they may be;
 * returns how many processes are hidden. */
int target_warn_hidden(struct cli *cli);
/* Was every counter of @vm unknown at its last reading (and was it read)? */
bool vm_no_counter(struct kvmstats_vm *vm);
/* Warn about each VM of @v whose last sweep gave none of its counters
 * (a locked-down kernel's debugfs): its numbers are all unknown. */
int target_warn_unknown(struct cli *cli, struct kvmstats_vmm *v);
/* An explicit --qmp that @v is not read through: said, and true (the
 * caller leaves @v out and fails). */
bool target_qmp_unused(struct cli *cli, const struct target_args *a,
		       struct kvmstats_vmm *v);
/* After a sweep begun at @since (CLOCK_MONOTONIC): read again, for at
 * most @max_ns, the readers whose data is older (QMP, libvirt polls).
 * @a: only the VMMs it selects (NULL: all). */
void target_settle(struct kvmstats_host *h, const struct target_args *a,
		   uint64_t since, uint64_t max_ns);

/* One reading's worth of targets: the host's VMMs (filtered) and files. */
struct target_set {
	struct kvmstats_host *host;
	struct kvmstats_vmm **vmms;
	size_t nvmms;
	struct kvmstats_reader **files;
	const char **paths;
	size_t nfiles;
	int failures;		/* targets that could not be opened */
};

int targets_open(struct cli *cli, struct target_set *t,
		 const struct target_args *a);
void targets_close(struct target_set *t);

/* ---- rendering of one stat ---------------------------------------- */

/* A log or linear histogram (many values), not a scalar. */
bool stat_is_hist(const struct kvmstats_stat *st);
/* The raw kernel value as JSON: integer, boolean, or array. */
struct json_object *stat_json(const struct kvmstats_stat *st,
			      const uint64_t *v);
/* {"name": value, ...} for a whole data block; a stat whose bit is set in
 * @missing (may be NULL) is null: its source could not read it. */
struct json_object *stats_json(const struct kvmstats_schema *s,
			       const void *data, const uint64_t *missing);
/* Readable value: "1.25 s", "yes", "n=12 p50=3 us p99=1 ms". */
void stat_human(const struct kvmstats_stat *st, const uint64_t *v, char *buf,
		size_t len);
/* A compact bar of a histogram's non-empty range, `width` cells. */
void hist_bar(const struct kvmstats_stat *st, const uint64_t *v, char *buf,
	      size_t len, int width);
/* Why a VM read through @source has no counter known, for the user. */
const char *unknown_reason(const char *source);
/* A stat with its schema: {"value", "type", "unit", "base", "exponent"},
 * and for histograms "bucket_size" and "bounds" ([lo, hi) per bucket in
 * raw units, hi null for the last); @missing as for stats_json(). */
struct json_object *stats_json_verbose(const struct kvmstats_schema *s,
				       const void *data,
				       const uint64_t *missing);

/* ---- CSV (RFC 4180) ------------------------------------------------ */

/* A row being written: fields are separated by commas, rows end with
 * CRLF, as RFC 4180 has them. */
struct csv {
	FILE *f;
	unsigned int col;	/* fields written in this row */
};

/* A text field, quoted when it holds a comma, a quote, CR or LF (quotes
 * doubled). Every text field of every CSV goes through here. */
void csv_field(struct csv *c, const char *s);
void csv_u64(struct csv *c, uint64_t v);
void csv_int(struct csv *c, long long v);
void csv_double(struct csv *c, double v, int decimals);
/* An empty field: a value that is not there (the pid of a file, a stat
 * its source could not read). */
void csv_empty(struct csv *c);
/* The vcpu,stat,index,value columns of a per-value row: vcpu empty for
 * a VM's stats (@vcpu < 0), value empty for a stat its source could not
 * read (@v NULL), else @v[@k]. */
void csv_value(struct csv *c, int vcpu, const struct kvmstats_stat *st,
	       uint32_t k, const uint64_t *v);
void csv_end(struct csv *c);

/* Drop every capability but the @n in @keep (CAP_*), bounding set
 * included, and set no_new_privs (caps.c). 0, or -1 when the kernel
 * refused. */
int caps_keep_only(const int *keep, size_t n);

/* A file to write, as root maybe in a shared directory (outfile.c):
 * never through a link, created with O_EXCL, a regular file; appended to
 * (@append) or replaced. NULL with errno (ELOOP: a link). */
FILE *open_output(const char *path, bool append);

/* Why reading a log (kvmstats_log_reader__next()) stopped, @err < 0. */
const char *log_strerror(int err);

/* ---- subcommands -------------------------------------------------- */
int cmd_top(struct cli *cli, int argc, char **argv);
int cmd_list(struct cli *cli, int argc, char **argv);
int cmd_dump(struct cli *cli, int argc, char **argv);
int cmd_record(struct cli *cli, int argc, char **argv);
int cmd_replay(struct cli *cli, int argc, char **argv);
int cmd_serve(struct cli *cli, int argc, char **argv);
int cmd_plan(struct cli *cli, int argc, char **argv);
int cmd_drain(struct cli *cli, int argc, char **argv);
int cmd_follow(struct cli *cli, int argc, char **argv);
int cmd_check(struct cli *cli, int argc, char **argv);
int cmd_demo(struct cli *cli, int argc, char **argv);
/* top, with what the screen says about its source instead of the log's
 * path (the demo's recording): a title and a status line, shown again
 * each time the log starts over. */
struct top_banner {
	const char *title;
	const char *notice;
};
int top_main(struct cli *cli, int argc, char **argv,
	     const struct top_banner *banner);
/* Why no VM shows and what to do, after "no VM found: ". */
const char *demo_hint(void);

#endif
