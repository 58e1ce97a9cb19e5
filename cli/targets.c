// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Targets of a command: the VMMs on the host (all, or chosen by pid or
 * name) through the library's host object, and image files. Every command
 * that reads VMs takes the same options, parsed here.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int target_args_init(struct target_args *a, int argc)
{
	memset(a, 0, sizeof(*a));
	a->pids_cap = (size_t)argc + 1;
	a->pids = calloc(a->pids_cap, sizeof(*a->pids));
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
	switch (c) {
	case 'p':
		return cli_add_pids(cli, arg, &a->pids, &a->npids, &a->pids_cap) ? -1 : 1;
	case 'g':
		return cli_parse_regex(cli, "--name", arg, &a->name_re, &a->name_set)
			       ? -1 : 1;
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
	case OPT_SOURCE_TIMEOUT: {
		long ms = cli_parse_long(cli, "--qmp-timeout", arg, 10, 60000);

		if (ms < 0)
			return -1;
		a->timeout_ms = (unsigned int)ms;
		return 1;
	}
	}
	return 0;
}

/* --source other than auto or @want while an option for @want is given. */
static bool other_source(const struct target_args *a, const char *want)
{
	return a->source && strcmp(a->source, "auto") && strcmp(a->source, want);
}

/* A --qmp socket that cannot be used is an error (status 1: a socket
 * comes and goes), never a silent fall back to another source (a debugfs
 * table of n/a, say). Whether QEMU answers on it is found out later. */
static int qmp_usable(struct cli *cli, const char *path)
{
	struct stat st;

	if (stat(path, &st)) {
		cli_err(cli, "--qmp %s: %s", path, strerror(errno));
		return EXIT_FAIL;
	}
	if (!S_ISSOCK(st.st_mode)) {
		cli_err(cli, "--qmp %s: not a socket", path);
		return EXIT_FAIL;
	}
	return 0;
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
	return a->qmp ? qmp_usable(cli, a->qmp) : 0;
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
		.libvirt_uri = a->libvirt_uri, .timeout_ms = a->timeout_ms });
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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Read @r again if its latest reading is older than @since: true when it
 * still is (a failed reader is done: it shows as unknown). */
static bool settle_reader(struct kvmstats_reader *r, uint64_t since)
{
	const struct kvmstats_sample *smp;

	if (!r || kvmstats_reader__error(r))
		return false;
	smp = kvmstats_reader__cur(r);
	if (smp && smp->time_ns >= since)
		return false;
	/* A reader read in the background stamps its own data's time. */
	if (kvmstats_reader__sweep(r, mono_ns()))
		return false;
	smp = kvmstats_reader__cur(r);
	return !smp || smp->time_ns < since;
}

static bool settle_pass(struct kvmstats_host *h, const struct target_args *a,
			uint64_t since)
{
	bool stale = false;

	for (size_t i = 0; i < kvmstats_host__num_vmms(h); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(h, i);

		if (a && !target_selected(a, v))
			continue;
		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int index;

			stale |= settle_reader(kvmstats_vm__reader(vm), since);
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
				stale |= settle_reader(
					kvmstats_vm__vcpu(vm, k, &index), since);
		}
	}
	return stale;
}

/*
 * A QMP or libvirt reading serves the data of the poll that the previous
 * reading asked for: right after a sweep begun at @since, it is as old as
 * the time since that reading (a whole interval), or older than the
 * program for the first one. Read those readers again, every 20 ms for at
 * most @max_ns, until their data was taken after @since; readers that
 * were fresh are left alone, so that their previous reading stays one
 * sweep back. Every reading is then the host as it was at the sweep, and
 * two sweeps an interval apart measure that interval whatever the source.
 */
void target_settle(struct kvmstats_host *h, const struct target_args *a,
		   uint64_t since, uint64_t max_ns)
{
	uint64_t end = since + max_ns;

	while (settle_pass(h, a, since) && mono_ns() < end) {
		struct timespec ts = {0, 20 * 1000000L};

		nanosleep(&ts, NULL);
	}
}

/* Is @pid a user process (a command line) whose fds we may not list? */
static bool fds_hidden(int dirfd, const char *pid)
{
	char path[300];
	char c;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/cmdline", pid);
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, &c, 1);
	close(fd);
	if (n != 1)
		return false;	/* a kernel thread, or a zombie */
	snprintf(path, sizeof(path), "%s/fd", pid);
	fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return false;
	}
	return errno == EACCES || errno == EPERM;
}

/* A kernel thread "kvm-pit/PID" belongs to a VM (with an in-kernel PIT)
 * of process PID: a VMM we may know of without seeing its fds. */
static long pit_owner(int dirfd, const char *pid)
{
	char path[300], comm[32] = "";
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/comm", pid);
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, comm, sizeof(comm) - 1);
	close(fd);
	if (n <= 0 || strncmp(comm, "kvm-pit/", 8))
		return 0;
	return strtol(comm + 8, NULL, 10);
}

bool target_pid_hidden(pid_t pid)
{
	char name[24];
	bool hidden;
	int pfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (pfd < 0)
		return false;
	snprintf(name, sizeof(name), "%d", (int)pid);
	hidden = fds_hidden(pfd, name);
	close(pfd);
	return hidden;
}

int target_hidden(struct target_hidden *out)
{
	struct dirent *de;
	long pits[64];
	size_t npits = 0;
	int pfd;
	DIR *d;

	memset(out, 0, sizeof(*out));
	d = opendir("/proc");
	if (!d)
		return -errno;
	pfd = dirfd(d);
	while ((de = readdir(d))) {
		long owner;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		owner = pit_owner(pfd, de->d_name);
		for (size_t i = 0; i < npits && owner > 0; i++)
			owner = pits[i] == owner ? 0 : owner;
		if (owner > 0 && npits < sizeof(pits) / sizeof(pits[0]))
			pits[npits++] = owner;
		out->procs += fds_hidden(pfd, de->d_name);
	}
	for (size_t i = 0; i < npits; i++) {
		char pid[24];

		snprintf(pid, sizeof(pid), "%ld", pits[i]);
		out->vmms += fds_hidden(pfd, pid);
	}
	closedir(d);
	return out->procs;
}

/* The hidden processes, as one sentence (empty when none). */
static void hidden_text(const struct target_hidden *h, char *buf, size_t len)
{
	char vmms[96] = "";

	buf[0] = 0;
	if (!h->procs)
		return;
	if (h->vmms)
		snprintf(vmms, sizeof(vmms), " (%d of them hold%s a VM: a "
			 "kvm-pit thread names %s)", h->vmms,
			 h->vmms == 1 ? "s" : "", h->vmms == 1 ? "it" : "them");
	snprintf(buf, len, "the fds of %d process%s of other users cannot be "
		 "seen by uid %d (not root, no CAP_SYS_PTRACE): VMMs among "
		 "them are not shown%s; run as root to see every VMM",
		 h->procs, h->procs == 1 ? "" : "es", (int)geteuid(), vmms);
}

int target_warn_hidden(struct cli *cli)
{
	struct target_hidden h;
	char msg[512];

	if (target_hidden(&h) <= 0)
		return 0;
	hidden_text(&h, msg, sizeof(msg));
	cli_warn(cli, "%s", msg);
	return h.procs;
}

bool vm_no_counter(struct kvmstats_vm *vm)
{
	struct kvmstats_reader *r = kvmstats_vm__reader(vm);
	bool read = false;
	int index;

	for (size_t k = 0; k <= kvmstats_vm__num_vcpus(vm); k++) {
		if (k)
			r = kvmstats_vm__vcpu(vm, k - 1, &index);
		if (!r || kvmstats_reader__error(r))
			continue;
		if (!kvmstats_reader__no_counter(r))
			return false;
		read = true;
	}
	return read;
}

int target_warn_unknown(struct cli *cli, struct kvmstats_vmm *v)
{
	int warned = 0;

	for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
		if (!vm_no_counter(kvmstats_vmm__vm(v, j)))
			continue;
		cli_warn(cli, "pid %d (%s), VM %zu: no counter readable: %s",
			 (int)kvmstats_vmm__pid(v), kvmstats_vmm__name(v), j,
			 unknown_reason(kvmstats_vmm__source(v)));
		warned++;
	}
	return warned;
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

bool target_qmp_unused(struct cli *cli, const struct target_args *a,
		       struct kvmstats_vmm *v)
{
	const struct kvmstats_vm *vm = kvmstats_vmm__vm(v, 0);
	const char *lv, *lc;

	if (!a->qmp || (a->source && strcmp(a->source, "auto") &&
			strcmp(a->source, "qmp")))
		return false;
	lv = vm ? kvmstats_vm__source(vm, KVMSTATS_LEVEL_VM) : NULL;
	lc = vm ? kvmstats_vm__source(vm, KVMSTATS_LEVEL_VCPU) : NULL;
	if ((lv && !strcmp(lv, "qmp")) || (lc && !strcmp(lc, "qmp")))
		return false;
	cli_err(cli, "--qmp %s: pid %d is not read through it (QEMU did not "
		"answer there), and no other source stands in for it",
		a->qmp, (int)kvmstats_vmm__pid(v));
	return true;
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
		if (target_qmp_unused(cli, a, v)) {
			t->failures++;
			continue;
		}
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
