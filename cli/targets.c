// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Targets of a command: the VMMs on the host (all, or chosen by pid or
 * name) through the library's host object, and image files. Every command
 * that reads VMs takes the same options, parsed here.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int target_args_init(struct target_args *a, int argc)
{
	memset(a, 0, sizeof(*a));
	a->pids = calloc((size_t)argc + 1, sizeof(*a->pids));
	a->files = calloc((size_t)argc + 1, sizeof(*a->files));
	return a->pids && a->files ? 0 : -ENOMEM;
}

void target_args_free(struct target_args *a)
{
	if (a->name_set)
		regfree(&a->name_re);
	free(a->pids);
	free(a->files);
	memset(a, 0, sizeof(*a));
}

static bool valid_source(const char *s)
{
	if (!strcmp(s, "auto"))
		return true;
	for (const char *const *n = kvmstats_sources(); *n; n++)
		if (!strcmp(*n, s))
			return true;
	return false;
}

/*
 * The operands that follow an option's argument in the command's argv,
 * up to the next option: `--file A B C` names three files. Works while
 * cli_parse() parses (cli->argv), and only when @arg is the argument
 * getopt just returned. Advances optind past them;
 * GNU getopt moves them ahead of any operand it skipped, as if they had
 * been options. Returns how many were stored in @out.
 */
size_t cli_more_operands(struct cli *cli, const char *arg, char **out)
{
	uintptr_t p, at = (uintptr_t)arg;
	size_t n = 0;

	if (!cli->argv || optind < 1 || optind > cli->argc)
		return 0;
	p = (uintptr_t)cli->argv[optind - 1];
	if (at < p || at > p + strlen(cli->argv[optind - 1]))
		return 0;
	while (optind < cli->argc && cli->argv[optind][0] != '-')
		out[n++] = cli->argv[optind++];
	return n;
}

int cli_target_opt(struct cli *cli, struct target_args *a, int c,
		   const char *arg)
{
	long v;

	switch (c) {
	case 'p':
		v = cli_parse_long(cli, "--pid", arg, 1, INT32_MAX);
		if (v < 0)
			return -1;
		a->pids[a->npids++] = (pid_t)v;
		return 1;
	case 'g':
		if (a->name_set)
			regfree(&a->name_re);
		if (regcomp(&a->name_re, arg, REG_EXTENDED | REG_NOSUB)) {
			cli_err(cli, "--name: '%s' is not a valid regular expression", arg);
			return -1;
		}
		a->name_set = true;
		return 1;
	case OPT_FILE:
		a->files[a->nfiles++] = (char *)arg;
		a->nfiles += cli_more_operands(cli, arg, a->files + a->nfiles);
		return 1;
	case OPT_SOURCE:
		if (!valid_source(arg)) {
			cli_err(cli, "--source: what is '%s'? (auto, fd, attach, qmp, "
				"libvirt, debugfs)", arg);
			return -1;
		}
		a->source = arg;
		return 1;
	case OPT_ATTACH:
		a->flags |= KVMSTATS_HOST_ATTACH;
		return 1;
	case OPT_FORCE:
		a->flags |= KVMSTATS_HOST_FORCE;
		return 1;
	case OPT_QMP:
		a->qmp = arg;
		return 1;
	case OPT_LIBVIRT_URI:
		a->libvirt_uri = arg;
		return 1;
	}
	return 0;
}

/* --source other than auto or @want while an option for @want is given. */
static bool other_source(const struct target_args *a, const char *want)
{
	return a->source && strcmp(a->source, "auto") && strcmp(a->source, want);
}

int target_args_check(struct cli *cli, const struct target_args *a,
		      bool qmp_ram)
{
	/* --source attach asks for the attach source as --attach does. */
	if ((a->flags & KVMSTATS_HOST_FORCE) && !(a->flags & KVMSTATS_HOST_ATTACH) &&
	    !(a->source && !strcmp(a->source, "attach")))
		return cli_bad(cli, "--force goes with --attach or --source attach");
	/* With --source qmp, --attach lets the kernel's fds check the order
	 * of QEMU's histogram lists (QEMU lists buckets last first). */
	if ((a->flags & KVMSTATS_HOST_ATTACH) && other_source(a, "attach") &&
	    strcmp(a->source, "qmp"))
		return cli_bad(cli, "--attach and --source %s: the attach source "
			       "is not tried with --source %s", a->source,
			       a->source);
	if (a->libvirt_uri && other_source(a, "libvirt"))
		return cli_bad(cli, "--libvirt-uri and --source %s: libvirt is "
			       "not asked", a->source);
	if (a->qmp && a->npids != 1)
		return cli_bad(cli, "--qmp PATH needs exactly one --pid");
	if (a->qmp && !qmp_ram && other_source(a, "qmp"))
		return cli_bad(cli, "--qmp and --source %s: QMP is not asked",
			       a->source);
	return 0;
}

bool target_selected(const struct target_args *a, struct kvmstats_vmm *v)
{
	return !a->name_set ||
	       !regexec(&a->name_re, kvmstats_vmm__name(v), 0, NULL, 0);
}

struct kvmstats_host *target_host_new(struct cli *cli,
				      const struct target_args *a)
{
	struct kvmstats_host *h;

	h = kvmstats_host__new(cli->ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts),
		.pids = a->pids, .npids = a->npids, .source = a->source,
		.flags = a->flags, .qmp_path = a->qmp,
		.libvirt_uri = a->libvirt_uri });
	if (!h)
		cli_err(cli, "cannot watch the host: %s", strerror(errno));
	return h;
}

/* Report (once per refresh) the VMMs asked for by pid that no source
 * could open. Returns how many. */
int target_report_errors(struct cli *cli, struct kvmstats_host *h)
{
	const char *e = kvmstats_host__errors(h);
	int n = 0;

	while (*e) {
		const char *nl = strchr(e, '\n');
		int len = nl ? (int)(nl - e) : (int)strlen(e);

		cli_err(cli, "%.*s", len, e);
		n++;
		e += len + (nl != NULL);
	}
	return n;
}

bool target_args_host(const struct target_args *a)
{
	return a->npids || a->name_set || a->source || a->flags || a->qmp ||
	       a->libvirt_uri;
}

static int add_file(struct cli *cli, struct target_set *t, const char *path)
{
	struct kvmstats_reader *r;
	char why[256] = "";

	/* "-": standard input, read as a stream when it is a pipe. */
	r = kvmstats_reader__open_file(cli->ctx, strcmp(path, "-") ? path : "/dev/stdin",
				       &(struct kvmstats_reader_opts){
					       .sz = sizeof(struct kvmstats_reader_opts),
					       .errbuf = why,
					       .errbuf_sz = sizeof(why) });
	if (!r) {
		cli_err(cli, "%s: %s", path, why);
		t->failures++;
		return -1;
	}
	t->files[t->nfiles] = r;
	t->paths[t->nfiles++] = path;
	return 0;
}

int targets_open(struct cli *cli, struct target_set *t,
		 const struct target_args *a)
{
	int n;

	memset(t, 0, sizeof(*t));
	t->files = calloc(a->nfiles + 1, sizeof(*t->files));
	t->paths = calloc(a->nfiles + 1, sizeof(*t->paths));
	if (!t->files || !t->paths)
		return -ENOMEM;
	for (size_t i = 0; i < a->nfiles; i++)
		add_file(cli, t, a->files[i]);
	/* Files alone: no host scan; an option that chooses VMMs asks for
	 * one as well. */
	if (a->nfiles && !target_args_host(a))
		return 0;
	t->host = target_host_new(cli, a);
	if (!t->host)
		return -errno;
	n = kvmstats_host__refresh(t->host);
	if (n < 0) {
		cli_err(cli, "scanning the host: %s", strerror(-n));
		return n;
	}
	t->failures += target_report_errors(cli, t->host);
	for (size_t i = 0; i < kvmstats_host__num_vmms(t->host); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(t->host, i);
		void *p;

		if (!target_selected(a, v))
			continue;
		p = realloc(t->vmms, (t->nvmms + 1) * sizeof(*t->vmms));
		if (!p)
			return -ENOMEM;
		t->vmms = p;
		t->vmms[t->nvmms++] = v;
	}
	return 0;
}

void targets_close(struct target_set *t)
{
	for (size_t i = 0; i < t->nfiles; i++)
		kvmstats_reader__close(t->files[i]);
	kvmstats_host__free(t->host);
	free(t->vmms);
	free(t->files);
	free(t->paths);
	memset(t, 0, sizeof(*t));
}
