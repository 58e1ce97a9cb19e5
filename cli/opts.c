// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * One grammar for every command: each has a table of its options
 * (struct cli_opt), from which getopt's long and short options, the
 * errors, --help and its JSON form are made, as bpftool and iproute2 keep
 * one way of asking in every command.
 *
 *  - the common options (--json, --csv, --pretty, -v, -q, -h) are taken
 *    before the command and after it alike; a command that has no JSON or
 *    CSV says so, whichever side they stood on;
 *  - every usage error is one line "kvmstats: CMD: ..." and status 2;
 *  - CMD --help lists every option with its argument, default and a line
 *    saying what it does; with --json it is one object, the list the man
 *    pages and the bash completion are tested against.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Common keys: letters no command uses for anything else. */
enum {
	KEY_JSON = 'j',
	KEY_CSV = 'C',
	KEY_PRETTY = 'P',
	KEY_VERBOSE = 'v',
	KEY_QUIET = 'q',
	KEY_HELP = 'h',
	KEY_VERSION = 'V',
};

static const struct cli_opt common_opts[] = {
	{ "json", KEY_JSON, CLI_OPT_SHORT | CLI_OPT_JSON, NULL, NULL,
	  "print JSON" },
	{ "csv", KEY_CSV, CLI_OPT_CSV, NULL, NULL,
	  "print CSV (RFC 4180: a header, CRLF, quoted fields)" },
	{ "pretty", KEY_PRETTY, CLI_OPT_JSON, NULL, NULL,
	  "indented JSON (implies --json)" },
	{ "verbose", KEY_VERBOSE, CLI_OPT_SHORT, NULL, NULL,
	  "say more: the library's notes too" },
	{ "quiet", KEY_QUIET, CLI_OPT_SHORT, NULL, NULL,
	  "no warnings, errors only" },
	{ "help", KEY_HELP, CLI_OPT_SHORT, NULL, NULL,
	  "this text, or with --json its option list as JSON" },
	{ 0 },
};

static size_t count(const struct cli_opt *o)
{
	size_t n = 0;

	while (o && o[n].name)
		n++;
	return n;
}

static const struct cli_opt *by_name(const struct cli_opt *o, const char *name,
				     size_t len)
{
	for (; o && o->name; o++)
		if (strlen(o->name) == len && !strncmp(o->name, name, len))
			return o;
	return NULL;
}

/* A common option that the command's table names again (to say what it
 * means there, e.g. dump's --verbose) is the command's. */
static bool overridden(const struct cli_spec *spec, const struct cli_opt *c)
{
	return by_name(spec->opts, c->name, strlen(c->name)) != NULL;
}

/* Shown by --help (and so in the man page and the completion): the
 * command's own, and the common ones its outputs give a meaning. */
static bool shown(const struct cli_spec *spec, const struct cli_opt *o)
{
	if ((o->flags & CLI_OPT_JSON) && !(spec->outputs & CLI_OUT_JSON))
		return false;
	return !(o->flags & CLI_OPT_CSV) || (spec->outputs & CLI_OUT_CSV);
}

/* Every option getopt takes for @spec, the command's first; NULL ended. */
static const struct cli_opt **all_opts(const struct cli_spec *spec)
{
	size_t n = count(spec->opts), k = 0;
	const struct cli_opt **all = calloc(n + count(common_opts) + 1,
					    sizeof(*all));

	if (!all)
		return NULL;
	for (size_t i = 0; i < n; i++)
		all[k++] = &spec->opts[i];
	for (const struct cli_opt *c = common_opts; c->name; c++)
		if (!overridden(spec, c))
			all[k++] = c;
	return all;
}

/* getopt's tables for @all: ':' first, so that a missing argument is
 * told apart from an unknown option; '+' at the global level, which
 * stops at the command. */
static int getopt_tables(const struct cli_opt **all, bool global,
			 struct option **longopts, char **shortopts)
{
	size_t n = 0, k = 0;
	char *s;

	while (all[n])
		n++;
	*longopts = calloc(n + 1, sizeof(**longopts));
	*shortopts = s = calloc(2 * n + 3, 1);
	if (!*longopts || !s)
		return -1;
	if (global)
		s[k++] = '+';
	s[k++] = ':';
	for (size_t i = 0; i < n; i++) {
		(*longopts)[i] = (struct option){
			all[i]->name,
			all[i]->arg ? required_argument : no_argument, NULL,
			all[i]->key };
		if (!(all[i]->flags & CLI_OPT_SHORT))
			continue;
		s[k++] = (char)all[i]->key;
		if (all[i]->arg)
			s[k++] = ':';
	}
	return 0;
}

/* The option a long word names: exact, else its unique prefix (as
 * getopt takes it); *n says how many begin so. */
static const struct cli_opt *match_word(const struct cli_opt **all,
					const char *name, size_t len, int *n)
{
	const struct cli_opt *found = NULL;

	*n = 0;
	for (size_t i = 0; all[i]; i++) {
		if (strncmp(all[i]->name, name, len))
			continue;
		if (strlen(all[i]->name) == len) {
			*n = 1;
			return all[i];
		}
		found = all[i];
		(*n)++;
	}
	return *n == 1 ? found : NULL;
}

/*
 * What was wrong with what getopt could not take, said as getopt would.
 * @word is argv[optind - 1]: the word in question for a long option and
 * for a missing argument (the last word); for an unknown letter inside
 * "-zx", optopt alone tells it.
 */
static int bad_option(struct cli *cli, const struct cli_opt **all, int c,
		      const char *word)
{
	bool is_long = word[0] == '-' && word[1] == '-';
	size_t len = strcspn(word, "=");
	const struct cli_opt *o = NULL;
	int n = 0;

	if (is_long)
		o = match_word(all, word + 2, len - 2, &n);
	if (c == ':' && is_long)
		return cli_bad(cli, "option '--%s' needs an argument",
			       o ? o->name : word + 2);
	if (c == ':')
		return cli_bad(cli, "option '-%c' needs an argument", optopt);
	/* An unknown letter, or --NAME=ARG of an option that takes none. */
	if (optopt && o && o->key == optopt && !o->arg && word[len] == '=')
		return cli_bad(cli, "option '--%s' takes no argument", o->name);
	if (optopt)
		return cli_bad(cli, "unrecognized option '-%c'", optopt);
	if (n > 1)
		return cli_bad(cli, "option '%.*s' is ambiguous", (int)len, word);
	return cli_bad(cli, "unrecognized option '%.*s'", (int)len, word);
}

static void common_opt(struct cli *cli, int key)
{
	switch (key) {
	case KEY_JSON:
		cli->given |= CLI_GIVEN_JSON;
		break;
	case KEY_CSV:
		cli->given |= CLI_GIVEN_CSV;
		break;
	case KEY_PRETTY:
		cli->given |= CLI_GIVEN_PRETTY;
		break;
	case KEY_VERBOSE:
		cli->given |= CLI_GIVEN_VERBOSE;
		cli->verbose++;
		break;
	case KEY_QUIET:
		cli->given |= CLI_GIVEN_QUIET;
		cli->verbose = -1;
		break;
	case KEY_HELP:
		cli->given |= CLI_GIVEN_HELP;
		break;
	}
	if (cli->given & (CLI_GIVEN_JSON | CLI_GIVEN_PRETTY))
		cli->format = OUT_JSON;
	else if (cli->given & CLI_GIVEN_CSV)
		cli->format = OUT_CSV;
	cli->pretty = cli->given & CLI_GIVEN_PRETTY;
}

static bool is_common(int key)
{
	for (const struct cli_opt *c = common_opts; c->name; c++)
		if (c->key == key)
			return true;
	return false;
}

/* What the command prints as text, and besides: "a table or JSON". */
static void outputs_text(const struct cli_spec *spec, char *buf, size_t len)
{
	const char *text = spec->text ? spec->text : "text";

	if (spec->outputs == (CLI_OUT_JSON | CLI_OUT_CSV))
		snprintf(buf, len, "%s, JSON or CSV", text);
	else if (spec->outputs)
		snprintf(buf, len, "%s or %s", text,
			 spec->outputs & CLI_OUT_JSON ? "JSON" : "CSV");
	else
		snprintf(buf, len, "%s", text);
}

/* The common options against each other, wherever they stood. */
static int check_conflicts(struct cli *cli)
{
	unsigned int g = cli->given;

	if ((g & CLI_GIVEN_CSV) && (g & (CLI_GIVEN_JSON | CLI_GIVEN_PRETTY)))
		return cli_bad(cli, "--csv and --%s: one output format",
			       g & CLI_GIVEN_JSON ? "json" : "pretty");
	if ((g & CLI_GIVEN_VERBOSE) && (g & CLI_GIVEN_QUIET))
		return cli_bad(cli, "--verbose and --quiet: one or the other");
	return 0;
}

/* The output asked for against those the command has. */
static int check_outputs(struct cli *cli, const struct cli_spec *spec)
{
	unsigned int g = cli->given;
	char out[64];

	outputs_text(spec, out, sizeof(out));
	if (cli->format == OUT_JSON && !(spec->outputs & CLI_OUT_JSON))
		return cli_bad(cli, "--%s: %s prints %s", g & CLI_GIVEN_JSON ?
			       "json" : "pretty", spec->cmd, out);
	if (cli->format == OUT_CSV && !(spec->outputs & CLI_OUT_CSV))
		return cli_bad(cli, "--csv: %s prints %s", spec->cmd, out);
	return 0;
}

static int run_getopt(struct cli *cli, const struct cli_spec *spec,
		      const struct cli_opt **all, void *ctx, int argc,
		      char **argv)
{
	struct option *longopts = NULL;
	char *shortopts = NULL;
	int c, ret = CLI_PARSED;

	if (getopt_tables(all, !spec->cmd, &longopts, &shortopts)) {
		cli_err(cli, "out of memory");
		ret = EXIT_FAIL;
		goto out;
	}
	opterr = 0;
	optind = 0;	/* from the start, getopt's state reset */
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		if (c == '?' || c == ':') {
			ret = bad_option(cli, all, c, argv[optind - 1]);
			break;
		}
		/* A command's entry for a common option only says what
		 * it means there: the option is still the common one. */
		if (is_common(c)) {
			common_opt(cli, c);
			continue;
		}
		if (spec->opt && spec->opt(cli, ctx, c, optarg)) {
			ret = EXIT_USAGE;
			break;
		}
	}
out:
	free(longopts);
	free(shortopts);
	return ret;
}

/* ---- --help ---------------------------------------------------------- */

/* "-p, --pid PID", "    --name, --guest REGEX": an option and its
 * aliases (the entries after it). */
static void opt_words(const struct cli_opt *const *o, char *buf, size_t len)
{
	size_t k;

	if (o[0]->flags & CLI_OPT_SHORT)
		k = (size_t)snprintf(buf, len, "-%c, --%s", o[0]->key, o[0]->name);
	else
		k = (size_t)snprintf(buf, len, "    --%s", o[0]->name);
	for (size_t i = 1; o[i] && (o[i]->flags & CLI_OPT_ALIAS) && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, ", --%s", o[i]->name);
	if (o[0]->arg && k < len)
		snprintf(buf + k, len - k, " %s", o[0]->arg);
}

#define HELP_COLUMN 30
#define HELP_WIDTH 100

static void help_text(const struct cli_spec *spec, const struct cli_opt **all,
		      const char *prog)
{
	char words[128];

	if (spec->cmd)
		printf("usage: %s %s [OPTIONS]%s%s\n", prog, spec->cmd,
		       spec->operands ? " " : "",
		       spec->operands ? spec->operands : "");
	else
		printf("usage: %s [OPTIONS] [COMMAND [COMMAND OPTIONS]]\n", prog);
	if (spec->about)
		printf("\n%s\n", spec->about);
	if (spec->cmds) {
		printf("\nCommands (a unique prefix will do):\n");
		for (size_t i = 0; i < spec->ncmds; i++)
			printf("  %-9s %s\n", spec->cmds[i].name,
			       spec->cmds[i].summary);
	}
	printf("\nOptions%s:\n", spec->cmd ? "" : " (before or after the command)");
	for (size_t i = 0; all[i]; i++) {
		const struct cli_opt *o = all[i];
		int w;

		if ((o->flags & CLI_OPT_ALIAS) || !shown(spec, o))
			continue;
		opt_words(all + i, words, sizeof(words));
		w = (int)strlen(words) + 2 > HELP_COLUMN ? (int)strlen(words) + 2
							   : HELP_COLUMN;
		printf("  %-*s%s", w, words, o->help);
		/* A default that would not fit goes under its line. */
		if (o->def && 2 + w + strlen(o->help) + strlen(o->def) + 12 >
				      HELP_WIDTH)
			printf("\n  %-*s", w, "");
		else if (o->def)
			putchar(' ');
		if (o->def)
			printf("(default: %s)", o->def);
		putchar('\n');
	}
	if (spec->page)
		printf("\nSee %s.\n", spec->page);
	else if (spec->cmd)
		printf("\nSee kvmstats-%s(1).\n", spec->cmd);
	else
		printf("\n'%s help COMMAND' (or '%s COMMAND --help') lists a "
		       "command's options; see kvmstats(1).\n"
		       "Exit status: 0 success, 1 failure (or a violation found "
		       "by check), 2 usage error.\n", prog, prog);
}

static struct json_object *str_or_null(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

static struct json_object *opt_json(const struct cli_opt *const *o)
{
	struct json_object *j = json_object_new_object();
	struct json_object *names = json_object_new_array();
	char w[128];

	if (o[0]->flags & CLI_OPT_SHORT) {
		snprintf(w, sizeof(w), "-%c", o[0]->key);
		json_object_array_add(names, json_object_new_string(w));
	}
	for (size_t i = 0; o[i] && (!i || (o[i]->flags & CLI_OPT_ALIAS)); i++) {
		snprintf(w, sizeof(w), "--%s", o[i]->name);
		json_object_array_add(names, json_object_new_string(w));
	}
	json_object_object_add(j, "names", names);
	json_object_object_add(j, "argument", str_or_null(o[0]->arg));
	json_object_object_add(j, "default", str_or_null(o[0]->def));
	json_object_object_add(j, "help", json_object_new_string(o[0]->help));
	return j;
}

/* The option list as one object: what the man pages and the completion
 * are tested against. */
static void help_json(const struct cli *cli, const struct cli_spec *spec,
		      const struct cli_opt **all)
{
	struct json_object *o = json_object_new_object();
	struct json_object *opts = json_object_new_array();
	struct json_object *outs = json_object_new_array();

	json_object_object_add(o, "command", str_or_null(spec->cmd));
	json_object_object_add(o, "operands", str_or_null(spec->operands));
	json_object_array_add(outs, json_object_new_string("text"));
	if (spec->outputs & CLI_OUT_JSON)
		json_object_array_add(outs, json_object_new_string("json"));
	if (spec->outputs & CLI_OUT_CSV)
		json_object_array_add(outs, json_object_new_string("csv"));
	json_object_object_add(o, "outputs", outs);
	json_object_object_add(o, "about", str_or_null(spec->about));
	for (size_t i = 0; all[i]; i++)
		if (!(all[i]->flags & CLI_OPT_ALIAS) && shown(spec, all[i]))
			json_object_array_add(opts, opt_json(all + i));
	json_object_object_add(o, "options", opts);
	if (spec->cmds) {
		struct json_object *cmds = json_object_new_array();

		for (size_t i = 0; i < spec->ncmds; i++) {
			struct json_object *c = json_object_new_object();

			json_object_object_add(c, "name", json_object_new_string(
						   spec->cmds[i].name));
			json_object_object_add(c, "summary", json_object_new_string(
						   spec->cmds[i].summary));
			json_object_array_add(cmds, c);
		}
		json_object_object_add(o, "commands", cmds);
	}
	cli_print_json(cli, o);
	json_object_put(o);
}

/* ---- parsing ----------------------------------------------------------- */

static int check_operands(struct cli *cli, const struct cli_spec *spec,
			  int argc, char **argv)
{
	unsigned int n = (unsigned int)(argc - optind);

	if (n < spec->min_operands)
		return cli_bad(cli, "which %s?", spec->operands);
	if (n > spec->max_operands)
		return cli_bad(cli, "unexpected argument '%s'",
			       argv[optind + (int)spec->max_operands]);
	return 0;
}

int cli_parse(struct cli *cli, const struct cli_spec *spec, void *ctx,
	      int argc, char **argv)
{
	const struct cli_opt **all = all_opts(spec);
	int ret, bad;

	if (!all) {
		cli_err(cli, "out of memory");
		return EXIT_FAIL;
	}
	cli->argc = argc;
	cli->argv = argv;
	ret = run_getopt(cli, spec, all, ctx, argc, argv);
	cli->argc = 0;
	cli->argv = NULL;
	if (ret != CLI_PARSED)
		goto out;
	/* The command checks them: before it, they may not be all. */
	if (spec->cmd && check_conflicts(cli)) {
		ret = EXIT_USAGE;
		goto out;
	}
	/* Before the command, --help waits for it: 'kvmstats --help dump'
	 * is dump's help. */
	if ((cli->given & CLI_GIVEN_HELP) && (spec->cmd || optind >= argc)) {
		if (cli->format == OUT_JSON)
			help_json(cli, spec, all);
		else
			help_text(spec, all, cli->prog);
		ret = EXIT_OK;
		goto out;
	}
	if (!spec->cmd)
		goto out;
	if (check_operands(cli, spec, argc, argv) || check_outputs(cli, spec))
		ret = EXIT_USAGE;
	else if (spec->check && (bad = spec->check(cli, ctx)))
		/* A check may find a thing named missing (status 1). */
		ret = bad == EXIT_FAIL ? EXIT_FAIL : EXIT_USAGE;
out:
	free(all);
	return ret;
}
