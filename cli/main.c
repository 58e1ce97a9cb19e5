// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats: KVM's binary statistics for every VM on the host.
 *
 *   kvmstats [OPTIONS] [COMMAND [OPTIONS]]
 *
 * One grammar in every command (opts.c): the common options stand before
 * or after the command. Only main() exits; every command returns EXIT_OK, EXIT_FAIL or
 * EXIT_USAGE.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "prom_process.h"
#include "sanitize.h"

#ifdef HAVE_LIBVIRT
#include <libvirt/virterror.h>

/* libvirt's default error handler prints on stderr; the reason reaches
 * the user through the library's error message instead. */
static void libvirt_quiet(void *arg, virErrorPtr err)
{
	(void)arg;
	(void)err;
}
#endif

static int cmd_help(struct cli *cli, int argc, char **argv);
static int cmd_version(struct cli *cli, int argc, char **argv);

static const struct cmd cmds[] = {
	{ "top", cmd_top, "live view of every VM's stats (the default)" },
	{ "list", cmd_list, "list the VMMs on the host and their sources" },
	{ "dump", cmd_dump, "print one reading of every VM and vCPU" },
	{ "record", cmd_record, "log readings to a file (or vmstat-like text)" },
	{ "replay", cmd_replay, "print a recorded log" },
	{ "serve", cmd_serve, "Prometheus exporter" },
	{ "plan", cmd_plan, "rank VMs by predicted live-migration cost" },
	{ "drain", cmd_drain, "the schedule that empties the host, and its time" },
	{ "follow", cmd_follow, "watch migrations beside the plan's prediction" },
	{ "check", cmd_check, "check the kernel's stats interface, or image files" },
	{ "demo", cmd_demo, "run built-in guests and watch them in top" },
	{ "version", cmd_version, "print the version" },
	{ "help", cmd_help, "the commands, or a command's options" },
};

/* "kvmstats: CMD: [warning: ]message", one line, whatever names it
 * holds: a VMM's name or a file's stat name may carry escape sequences for
 * the terminal, or a newline that would forge a line of ours. */
static void vmsg(const struct cli *cli, const char *tag, const char *fmt,
		 va_list ap)
{
	char msg[2048], out[4096];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	str_escape(out, sizeof(out), msg);
	if (!cli->cmd)
		fprintf(stderr, "%s: %s%s\n", cli->prog, tag, out);
	else
		fprintf(stderr, "%s: %s: %s%s\n", cli->prog, cli->cmd, tag, out);
}

void cli_err(const struct cli *cli, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(cli, "", fmt, ap);
	va_end(ap);
}

void cli_warn(const struct cli *cli, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(cli, "warning: ", fmt, ap);
	va_end(ap);
}

int cli_bad(const struct cli *cli, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(cli, "", fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

long cli_parse_long(const struct cli *cli, const char *opt, const char *arg,
		    long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 0);
	if (errno || end == arg || *end || v < min || v > max) {
		cli_err(cli, "%s: '%s' is not a number in %ld..%ld", opt, arg, min,
			max);
		return -1;
	}
	return v;
}

int cli_parse_regex(const struct cli *cli, const char *opt, const char *arg,
		    regex_t *re, bool *set)
{
	if (*set)
		regfree(re);
	*set = !regcomp(re, arg, REG_EXTENDED | REG_NOSUB);
	if (*set)
		return 0;
	cli_err(cli, "%s: '%s' is not a valid regular expression", opt, arg);
	return -1;
}

int cli_add_pids(const struct cli *cli, const char *arg, pid_t **pids,
		 size_t *n, size_t *cap)
{
	const char *p = arg;
	char one[24];

	do {
		size_t len = strcspn(p, ",");
		long v;

		if (len >= sizeof(one)) {
			cli_err(cli, "--pid: '%.*s' is not a number in 1..%d",
				(int)len, p, INT32_MAX);
			return -1;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		v = cli_parse_long(cli, "--pid", one, 1, INT32_MAX);
		if (v < 0)
			return -1;
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 8;
			pid_t *grown = realloc(*pids, c * sizeof(*grown));

			if (!grown) {
				cli_err(cli, "--pid: %s", strerror(ENOMEM));
				return -1;
			}
			*pids = grown;
			*cap = c;
		}
		(*pids)[(*n)++] = (pid_t)v;
		p += len;
	} while (*p++ == ',');
	return 0;
}

struct json_object *cli_json_double(double v)
{
	char buf[32];

	if (!isfinite(v))
		return NULL;
	/* The fewest digits that read back as @v: 0.3, not json-c's
	 * 0.29999999999999999, which is the same double to a reader that
	 * parses it but not to one that keeps the decimal (jq 1.7). */
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, sizeof(buf), "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	if (!strpbrk(buf, ".e"))
		strcat(buf, ".0");	/* still a double to a typed reader */
	return json_object_new_double_s(v, buf);
}

void cli_print_json(const struct cli *cli, struct json_object *o)
{
	int flags = JSON_C_TO_STRING_NOSLASHESCAPE |
		    (cli->pretty ? JSON_C_TO_STRING_PRETTY |
					   JSON_C_TO_STRING_SPACED
				 : JSON_C_TO_STRING_PLAIN);
	struct json_object *clean = json_clean(o);

	fputs(json_object_to_json_string_ext(clean, flags), stdout);
	fputc('\n', stdout);
	if (clean != o)
		json_object_put(clean);
}

/* ---- the global options, help, version ----------------------------- */

static int main_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	(void)cli;
	(void)arg;
	if (key == 'V')
		*(bool *)ctx = true;
	return 0;
}

static const struct cli_opt main_opts[] = {
	{ "version", 'V', CLI_OPT_SHORT, NULL, NULL,
	  "print the version, as the version command does" },
	{ 0 },
};

/* --csv is one of them, for the commands that print CSV. */
static const struct cli_spec main_spec = {
	.outputs = CLI_OUT_JSON | CLI_OUT_CSV,
	.about = "KVM's binary statistics for every VM and vCPU on the host. "
		 "Without a command:\ntop, and options the global level does "
		 "not take are top's (kvmstats -1 -p PID).",
	.opts = main_opts,
	.opt = main_opt,
	.cmds = cmds,
	.ncmds = sizeof(cmds) / sizeof(cmds[0]),
};

/* Commands may be abbreviated to any unique prefix, as in bpftool. */
static const struct cmd *find_cmd(const char *name)
{
	const struct cmd *found = NULL;
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
		if (!strncmp(cmds[i].name, name, n)) {
			if (found)
				return NULL;
			found = &cmds[i];
		}
	}
	return found;
}

static void lib_log(enum kvmstats_log_level level, const char *msg, void *arg)
{
	struct cli *cli = arg;

	if (level == KVMSTATS_LOG_WARN ? cli->verbose >= 0 : cli->verbose > 0)
		cli_warn(cli, "%s", msg);
}

static const struct cli_spec help_spec = {
	.cmd = "help",
	.operands = "[COMMAND]",
	.max_operands = 1,
	.outputs = CLI_OUT_JSON,
	.page = "kvmstats(1)",
	.about = "The commands and the global options. 'help COMMAND' is "
		 "'COMMAND --help':\nevery option of the command with its "
		 "default; with --json, as JSON.",
};

/* `kvmstats help CMD` is `kvmstats CMD --help`. */
static int cmd_help(struct cli *cli, int argc, char **argv)
{
	char *hargv[] = { NULL, "--help", NULL };
	const struct cmd *c;
	int ret;

	ret = cli_parse(cli, &help_spec, NULL, argc, argv);
	if (ret != CLI_PARSED)
		return ret;
	if (optind >= argc) {
		cli->cmd = NULL;
		hargv[0] = (char *)cli->prog;
		return cli_parse(cli, &main_spec, NULL, 2, hargv);
	}
	c = find_cmd(argv[optind]);
	if (!c)
		return cli_bad(cli, "what is '%s'? Try '%s help'.",
			       argv[optind], cli->prog);
	cli->cmd = c->name;
	hargv[0] = (char *)c->name;
	return c->fn(cli, 2, hargv);
}

static void print_version(const struct cli *cli)
{
	const struct build_info *bi = build_info();
	struct json_object *o, *version, *commit;

	if (cli->format != OUT_JSON) {
		printf("kvmstats %s (", kvmstats_version_string());
		if (bi->commit[0])
			printf("git %s, ", bi->commit);
		printf("%s, %s, libvirt %s)\n", bi->arch, bi->compiler,
		       bi->libvirt ? "yes" : "no");
		return;
	}
	o = json_object_new_object();
	version = json_object_new_string(kvmstats_version_string());
	commit = bi->commit[0] ? json_object_new_string(bi->commit) : NULL;
	json_object_object_add(o, "version", version);
	json_object_object_add(o, "commit", commit);
	json_object_object_add(o, "compiler",
			       json_object_new_string(bi->compiler));
	json_object_object_add(o, "arch", json_object_new_string(bi->arch));
	json_object_object_add(o, "libvirt",
			       json_object_new_boolean(bi->libvirt));
	cli_print_json(cli, o);
	json_object_put(o);
}

static const struct cli_spec version_spec = {
	.cmd = "version",
	.outputs = CLI_OUT_JSON,
	.page = "kvmstats(1)",
	.about = "The version, git commit (when built from git), architecture, "
		 "compiler, and\nwhether the libvirt source is built in.",
};

static int cmd_version(struct cli *cli, int argc, char **argv)
{
	int ret = cli_parse(cli, &version_spec, NULL, argc, argv);

	if (ret != CLI_PARSED)
		return ret;
	print_version(cli);
	return EXIT_OK;
}

/*
 * kvm_stat's way: options without a command are top's (`kvmstats -1 -p
 * 42`). True when no word names a command and an option is one the global
 * level does not take.
 */
static bool top_options(int argc, char **argv)
{
	static const char *const global[] = {
		"-j", "--json", "--csv", "--pretty", "-v", "--verbose", "-q",
		"--quiet", "-h", "--help", "-V", "--version",
	};
	bool other = false;

	for (int i = 1; i < argc; i++) {
		bool known = false;

		if (argv[i][0] != '-' && find_cmd(argv[i]))
			return false;
		if (argv[i][0] != '-')
			continue;
		for (size_t k = 0; k < sizeof(global) / sizeof(global[0]); k++)
			known |= !strcmp(argv[i], global[k]);
		other |= !known;
	}
	return other;
}

/* The global options, then the command (top when there is none): its
 * argv into *@argc, *@argv. CLI_PARSED, or the exit status. */
static int global(struct cli *cli, int *argc, char ***argv,
		  const struct cmd **cmd)
{
	static char *top_argv[] = { "top", NULL };
	bool version = false;
	int ret;

	ret = cli_parse(cli, &main_spec, &version, *argc, *argv);
	if (ret != CLI_PARSED)
		return ret;
	if (version) {
		print_version(cli);
		return EXIT_OK;
	}
	/* No command: top, as kvm_stat opens its live view. */
	if (optind >= *argc) {
		*argc = 1;
		*argv = top_argv;
		return CLI_PARSED;
	}
	*cmd = find_cmd((*argv)[optind]);
	if (!*cmd)
		return cli_bad(cli, "what is '%s'? Try '%s help'.",
			       (*argv)[optind], cli->prog);
	*argc -= optind;
	*argv += optind;
	return CLI_PARSED;
}

int main(int argc, char **argv)
{
	struct cli cli = { .prog = "kvmstats" };
	const struct cmd *cmd = &cmds[0];
	int ret;

	/* A reader piping us into head must not kill us mid-write. */
	signal(SIGPIPE, SIG_IGN);
#ifdef HAVE_LIBVIRT
	virSetErrorFunc(NULL, libvirt_quiet);
#endif
	if (top_options(argc, argv)) {
		argv[0] = (char *)cmd->name;
	} else {
		ret = global(&cli, &argc, &argv, &cmd);
		if (ret != CLI_PARSED)
			return ret;
	}
	cli.ctx = kvmstats_ctx__new(&(struct kvmstats_ctx_opts){
		.sz = sizeof(struct kvmstats_ctx_opts), .log = lib_log,
		.log_arg = &cli });
	if (!cli.ctx) {
		cli_err(&cli, "out of memory");
		return EXIT_FAIL;
	}
	/* From here on, every message is "kvmstats: CMD: ...". */
	cli.cmd = cmd->name;
	ret = cmd->fn(&cli, argc, argv);
	kvmstats_ctx__free(cli.ctx);
	if (fflush(stdout) || ferror(stdout)) {
		if (errno != EPIPE)
			cli_err(&cli, "writing output: %s", strerror(errno));
		if (ret == EXIT_OK)
			ret = EXIT_FAIL;
	}
	return ret;
}
