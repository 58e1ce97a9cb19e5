// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats: KVM's binary statistics for every VM on the host.
 *
 *   kvmstats [--json|--csv] [--pretty] [-v] COMMAND [OPTIONS]
 *
 * Only main() exits; every command returns EXIT_OK, EXIT_FAIL or
 * EXIT_USAGE.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
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
	{ "check", cmd_check, "check the kernel's stats interface, or image files" },
	{ "demo", cmd_demo, "run built-in guests and watch them in top" },
	{ "version", cmd_version, "print the version" },
	{ "help", cmd_help, "this text" },
};

/* "kvmstats: CMD: [warning: ]message", one line, whatever names it
 * holds: a VMM's name or a file's stat name may carry escape sequences for
 * the terminal, or a newline that would forge a line of ours. A message
 * that names its command itself ("dump: ...") does not get it twice. */
static void vmsg(const struct cli *cli, const char *tag, const char *fmt,
		 va_list ap)
{
	size_t n = cli->cmd ? strlen(cli->cmd) : 0;
	char msg[2048], out[4096];
	const char *m = out;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	str_escape(out, sizeof(out), msg);
	if (!cli->cmd) {
		fprintf(stderr, "%s: %s%s\n", cli->prog, tag, m);
		return;
	}
	if (!strncmp(m, cli->cmd, n) && m[n] == ':' && m[n + 1] == ' ')
		m += n + 2;
	fprintf(stderr, "%s: %s: %s%s\n", cli->prog, cli->cmd, tag, m);
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

int cli_usage(const struct cli *cli, const char *cmd, const char *usage)
{
	fprintf(stderr, "usage: %s %s %s\n", cli->prog, cmd, usage);
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

bool cli_format_opt(struct cli *cli, int c)
{
	switch (c) {
	case 'j':
		cli->format = OUT_JSON;
		return true;
	case 'C':
		cli->format = OUT_CSV;
		return true;
	case 'P':
		cli->format = OUT_JSON;
		cli->pretty = true;
		return true;
	}
	return false;
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

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [--json|--csv] [--pretty] [--verbose] COMMAND [OPTIONS]\n\n"
		"Commands:\n",
		prog);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-9s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'%s COMMAND --help' tells a command's options; see kvmstats(1).\n"
		   "Exit status: 0 success, 1 failure (or a violation found by check),\n"
		   "2 usage error.\n",
		prog);
}

static const struct cmd *find_cmd(const char *name);

/* `kvmstats help CMD` is `kvmstats CMD --help`. */
static int cmd_help(struct cli *cli, int argc, char **argv)
{
	char *hargv[] = { NULL, "--help", NULL };
	const struct cmd *c;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout, cli->prog);
		return EXIT_OK;
	}
	if (argc > 2) {
		cli_err(cli, "unexpected argument '%s'", argv[2]);
		return cli_usage(cli, "help", "[COMMAND]");
	}
	c = find_cmd(argv[1]);
	if (!c) {
		cli_err(cli, "what is '%s'? Try '%s help'.", argv[1],
			cli->prog);
		return EXIT_USAGE;
	}
	cli->cmd = c->name;
	hargv[0] = argv[0];
	cli->argc = 2;
	cli->argv = hargv;
	optind = 0;
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

static int cmd_version(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_FORMAT_LONGOPTS,
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static const char version_usage[] = "[--json [--pretty]]";
	int c;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		if (c == 'C') {
			cli_err(cli, "--csv: version prints text or JSON");
			return EXIT_USAGE;
		}
		if (cli_format_opt(cli, c))
			continue;
		if (c == 'h') {
			printf("usage: %s version %s\n\n"
			       "The version, git commit (when built from git), "
			       "architecture, compiler, and\n"
			       "whether the libvirt source is built in.\n"
			       "  --json    one JSON object\n"
			       "  --pretty  indented JSON (implies --json)\n",
			       cli->prog, version_usage);
			return EXIT_OK;
		}
		return cli_usage(cli, "version", version_usage);
	}
	if (optind < argc) {
		cli_err(cli, "unexpected argument '%s'", argv[optind]);
		return cli_usage(cli, "version", version_usage);
	}
	print_version(cli);
	return EXIT_OK;
}

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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_FORMAT_LONGOPTS,
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct cli cli = { .prog = "kvmstats" };
	char getopt_prog[64];
	const struct cmd *cmd;
	int c, ret;

	/* A reader piping us into head must not kill us mid-write. */
	signal(SIGPIPE, SIG_IGN);
#ifdef HAVE_LIBVIRT
	virSetErrorFunc(NULL, libvirt_quiet);
#endif
	/* getopt's own messages ("unrecognized option") name argv[0]: the
	 * program, not the path it was run by. */
	argv[0] = (char *)cli.prog;
	while ((c = getopt_long(argc, argv, "+jvqhV", opts, NULL)) != -1) {
		if (cli_format_opt(&cli, c))
			continue;
		switch (c) {
		case 'v':
			cli.verbose++;
			break;
		case 'q':
			cli.verbose = -1;
			break;
		case 'h':
			usage(stdout, cli.prog);
			return EXIT_OK;
		case 'V':
			print_version(&cli);
			return EXIT_OK;
		default:
			usage(stderr, cli.prog);
			return EXIT_USAGE;
		}
	}
	/* No command: top, as kvm_stat opens its live view. */
	cmd = optind < argc ? find_cmd(argv[optind]) : &cmds[0];
	if (optind >= argc)
		optind--;	/* the command's argv[0] is then the program */
	if (!cmd) {
		cli_err(&cli, "what is '%s'? Try '%s help'.", argv[optind], cli.prog);
		return EXIT_USAGE;
	}
	cli.ctx = kvmstats_ctx__new(&(struct kvmstats_ctx_opts){
		.sz = sizeof(struct kvmstats_ctx_opts), .log = lib_log,
		.log_arg = &cli });
	if (!cli.ctx) {
		cli_err(&cli, "out of memory");
		return EXIT_FAIL;
	}
	argc -= optind;
	argv += optind;
	optind = 0;	/* reset getopt for the command's own options */
	/* ... and in a command, "kvmstats: CMD: unrecognized option". */
	cli.cmd = cmd->name;
	cli.argc = argc;
	cli.argv = argv;
	snprintf(getopt_prog, sizeof(getopt_prog), "%s: %s", cli.prog,
		 cmd->name);
	argv[0] = getopt_prog;
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
