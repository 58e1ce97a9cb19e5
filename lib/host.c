// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The host: every VMM, each served by the best source that works for it,
 * and their life cycle.
 *
 * A VMM is pinned by a pidfd from the moment it is opened: fds are listed
 * and taken only after pidfd_open(), so a reused pid can never mix two
 * processes, and a VMM whose pidfd turns readable (it exited) is dropped
 * before the next sweep, closing our copies of its stats fds at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct ks_source *const sources[] = {
	&ks_source_fd, &ks_source_attach, &ks_source_qmp, &ks_source_libvirt,
	&ks_source_debugfs,
};

static const char *const source_names[] = {
	"fd", "attach", "qmp", "libvirt", "debugfs", NULL,
};

const char *const *kvmstats_sources(void)
{
	return source_names;
}

/* ---- the fd source: stats fds the VMM already holds ---- */

static bool fd_probe(const struct ks_source_args *a, pid_t pid)
{
	struct kvmstats_proc_fd *fds;
	bool found = false;
	int n = kvmstats_proc__kvm_fds(pid, &fds);

	(void)a;
	for (int i = 0; i < n; i++)
		found |= fds[i].kind == KVMSTATS_FD_VM_STATS ||
			 fds[i].kind == KVMSTATS_FD_VCPU_STATS;
	if (n >= 0)
		free(fds);
	return found;
}

static int fd_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	int n = ks_vmm_take_held_fds(a->ctx, v);

	if (n > 0)
		return 0;
	ks_err(a->errbuf, a->errbuf_sz, "holds no readable stats fd");
	return n < 0 ? n : -ENOENT;
}

static int fd_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	return ks_vmm_take_held_fds(a->ctx, v);
}

const struct ks_source ks_source_fd = {
	.name = "fd",
	.probe = fd_probe,
	.open = fd_open,
	.refresh = fd_refresh,
};

/* ---- host ---- */

static const struct ks_source *find_source(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(sources); i++)
		if (!strcmp(sources[i]->name, name))
			return sources[i];
	return NULL;
}

static void fill_opts(struct kvmstats_host_opts *o)
{
	if (!o->timeout_ms)
		o->timeout_ms = 1000;
	if (!o->source)
		o->source = "auto";
}

struct kvmstats_host *kvmstats_host__new(struct kvmstats_ctx *ctx,
					 const struct kvmstats_host_opts *opts)
{
	struct kvmstats_host *h = calloc(1, sizeof(*h));
	int err;

	if (!h)
		return NULL;
	err = ks_opts_copy(&h->o, sizeof(h->o), opts);
	if (err)
		goto err;
	fill_opts(&h->o);
	err = -EINVAL;
	if (strcmp(h->o.source, "auto")) {
		h->only = find_source(h->o.source);
		if (!h->only)
			goto err;
	}
	if (h->o.npids) {
		err = -ENOMEM;
		h->pids = malloc(h->o.npids * sizeof(*h->pids));
		if (!h->pids)
			goto err;
		memcpy(h->pids, h->o.pids, h->o.npids * sizeof(*h->pids));
		h->o.pids = h->pids;
	}
	h->ctx = ctx;
	h->next_uid = 1;
	h->gen = ks_now_ns();
	return h;
err:
	free(h);
	errno = -err;
	return NULL;
}

void kvmstats_host__free(struct kvmstats_host *h)
{
	if (!h)
		return;
	ks_sweep_pool_free(h->pool);	/* its threads read our readers */
	for (size_t i = 0; i < h->n; i++)
		kvmstats_vmm__close(h->vmms[i]);
	free(h->vmms);
	free(h->retry);
	free(h->claims);
	free(h->pids);
	free(h);
}

static void note_error(struct kvmstats_host *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note_error(struct kvmstats_host *h, const char *fmt, ...)
{
	size_t used = strlen(h->errors);
	va_list ap;

	if (used + 2 >= sizeof(h->errors))
		return;
	va_start(ap, fmt);
	vsnprintf(h->errors + used, sizeof(h->errors) - used - 1, fmt, ap);
	va_end(ap);
	strcat(h->errors, "\n");
}

static void drop_vm_priv(struct kvmstats_vmm *v)
{
	if (v->vm_priv_free)
		v->vm_priv_free(v->vm_priv);
	v->vm_priv = NULL;
	v->vm_priv_free = NULL;
}

static void vmm_reset(struct kvmstats_vmm *v)
{
	for (size_t i = 0; i < v->nvms; i++)
		ks_vm_free(v->vms[i]);
	v->nvms = 0;
	if (v->priv_free)
		v->priv_free(v->priv);
	v->priv = NULL;
	v->priv_free = NULL;
	drop_vm_priv(v);
	v->memory_bytes = 0;
}

/* ---- sources per level ---- */

/* Who may serve the VM stats of a VMM whose own source has none (QEMU
 * 8.1+ holds its vCPUs' stats fds, not its VM's), best first. */
static const struct ks_source *const vm_sources[] = {
	&ks_source_attach, &ks_source_qmp, &ks_source_libvirt, &ks_source_debugfs,
};

static void why_add(char *buf, size_t len, const char *src, const char *why)
{
	size_t used = strlen(buf);

	if (used + 1 < len)
		snprintf(buf + used, len - used, "%s%s: %s", used ? "; " : "",
			 src, why);
}

/* The levels the VMM's own source serves. */
static void mark_levels(struct kvmstats_vmm *v)
{
	for (size_t i = 0; i < v->nvms; i++) {
		struct kvmstats_vm *vm = v->vms[i];

		if (vm->r && !vm->level_src[KVMSTATS_LEVEL_VM])
			vm->level_src[KVMSTATS_LEVEL_VM] = v->src->name;
		if (vm->nvcpus)
			vm->level_src[KVMSTATS_LEVEL_VCPU] = v->src->name;
	}
}

static size_t vms_without_stats(const struct kvmstats_vmm *v)
{
	size_t n = 0;

	for (size_t i = 0; i < v->nvms; i++)
		n += !v->vms[i]->r;
	return n;
}

/* Try @s for the VM stats alone; 0 when it served at least one VM. */
static int try_vm_source(const struct kvmstats_host *h, struct kvmstats_vmm *v,
			 const struct ks_source *s, char *why, size_t why_sz)
{
	struct ks_source_args a = { h->ctx, &h->o, why, why_sz, true };
	size_t before = vms_without_stats(v);
	int err;

	why[0] = 0;
	if (s == &ks_source_attach && !(h->o.flags & KVMSTATS_HOST_ATTACH)) {
		ks_err(why, why_sz, "not allowed (--attach allows it)");
		return -EPERM;
	}
	if (s->one_vm && v->nvms > 1) {
		ks_err(why, why_sz, "knows one VM, this VMM has %zu", v->nvms);
		return -EINVAL;
	}
	err = s->open(&a, v);
	if (!err && vms_without_stats(v) == before)
		err = -ENOENT;
	if (err) {
		/* Its readers first: they use its state. */
		for (size_t i = 0; i < v->nvms; i++)
			if (!v->vms[i]->level_src[KVMSTATS_LEVEL_VM] && v->vms[i]->r) {
				kvmstats_reader__close(v->vms[i]->r);
				v->vms[i]->r = NULL;
			}
		drop_vm_priv(v);
		if (!why[0])
			ks_err(why, why_sz, "%s", strerror(-err));
		return err;
	}
	v->vm_src = s;
	for (size_t i = 0; i < v->nvms; i++)
		if (v->vms[i]->r && !v->vms[i]->level_src[KVMSTATS_LEVEL_VM])
			v->vms[i]->level_src[KVMSTATS_LEVEL_VM] = s->name;
	return 0;
}

/* VMs whose source has no VM stats get them from the best other source
 * that has (auto only: a source the user named is the only one). Where
 * none has, each such VM says why. */
static void complete_vm_level(const struct kvmstats_host *h,
			      struct kvmstats_vmm *v)
{
	char all[512] = "", why[256];

	mark_levels(v);
	if (!vms_without_stats(v))
		return;
	if (h->only) {
		snprintf(all, sizeof(all), "source %s has none for it (without "
			 "--source, another source is asked)", h->only->name);
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(vm_sources); i++) {
			const struct ks_source *s = vm_sources[i];

			if (s == v->src || !s->vm_level)
				continue;
			if (!try_vm_source(h, v, s, why, sizeof(why)))
				break;
			why_add(all, sizeof(all), s->name, why);
		}
	}
	for (size_t i = 0; i < v->nvms; i++)
		if (!v->vms[i]->r)
			snprintf(v->vms[i]->why_none[KVMSTATS_LEVEL_VM],
				 sizeof(v->vms[i]->why_none[0]), "%s", all);
}

/* Try the sources in order of preference; the first that opens wins. */
static struct kvmstats_vmm *open_vmm(const struct kvmstats_host *h, pid_t pid,
				     char *why, size_t why_sz)
{
	struct ks_source_args a = { h->ctx, &h->o, why, why_sz };
	struct kvmstats_vmm *v = kvmstats_vmm__new(pid, NULL);
	int err = -ENOENT;

	if (!v)
		return NULL;
	err = ks_vmm_pidfd_open(v);
	if (err) {
		if (err == -ESRCH)
			ks_err(why, why_sz, "no such process");
		else
			ks_err(why, why_sz, "pidfd_open: %s", strerror(-err));
		goto err;
	}
	kvmstats_proc__name(pid, v->name, sizeof(v->name));
	/* No VMM (pid 1, a typo): no source is worth a try, and saying so
	 * beats a source's own complaint. */
	err = ks_proc_vmm_check(pid, why, why_sz);
	if (err)
		goto err;
	err = -ENOENT;
	for (size_t i = 0; i < ARRAY_SIZE(sources); i++) {
		const struct ks_source *s = sources[i];

		if (h->only && s != h->only)
			continue;
		if (!h->only && s == &ks_source_attach &&
		    !(h->o.flags & KVMSTATS_HOST_ATTACH))
			continue;
		if (!h->only && s->probe && !s->probe(&a, pid))
			continue;
		err = s->open(&a, v);
		if (!err) {
			v->source = s->reads_as ? s->reads_as : s->name;
			v->src = s;
			complete_vm_level(h, v);
			return v;
		}
		vmm_reset(v);
	}
	if (err == -ENOENT && !h->only)
		ks_err(why, why_sz, "no source can read it (held stats fds, "
		       "--attach, a QMP socket, libvirt or debugfs)");
	else if (!why[0])
		ks_err(why, why_sz, "%s", strerror(-err));
err:
	kvmstats_vmm__close(v);
	errno = -err;
	return NULL;
}

static ssize_t find_pid(const struct kvmstats_host *h, pid_t pid)
{
	for (size_t i = 0; i < h->n; i++)
		if (kvmstats_vmm__pid(h->vmms[i]) == pid)
			return (ssize_t)i;
	return -1;
}

/* Drop every VMM whose process exited; returns how many. */
static int drop_dead(struct kvmstats_host *h)
{
	size_t j = 0;
	int dropped = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (kvmstats_vmm__alive(h->vmms[i])) {
			h->vmms[j++] = h->vmms[i];
			continue;
		}
		kvmstats_vmm__close(h->vmms[i]);
		dropped++;
	}
	h->n = j;
	if (dropped)
		ks_host_changed(h);
	return dropped;
}

int ks_host_drop_dead(struct kvmstats_host *h)
{
	return drop_dead(h);
}

/*
 * Opening a VMM can be slow (a monitor that never answers costs the
 * --timeout of each exchange), so it is split from the host (see
 * kvmstats_host__pending()): the host's thread claims the pids to open,
 * any thread opens them (kvmstats_host__prepare(), which reads only what
 * never changes: the options, the sources, the context's locked caches),
 * and the host's thread inserts the result.
 *
 * Every failed open backs off: the next try waits a delay that doubles
 * up to a minute, from a quarter second for a failure that was quick (a
 * VMM that just started is read soon) and two seconds for a slow one.
 * A VMM can fork, and its children hold its VM fds: the back-off is kept
 * per family (a VMM whose parent is a VMM too shares its parent's
 * entry), a family has at most one open in flight, and a caller bounds
 * how many are in flight at all, so that the work a host's VMMs cause
 * stays bounded however many processes they make.
 */
#define KS_SLOW_OPEN_NS (100 * 1000000ull)
#define KS_RETRY_FAST_NS (250 * 1000000ull)
#define KS_RETRY_SLOW_NS (2 * 1000000000ull)
#define KS_RETRY_MAX_NS (60 * 1000000000ull)
#define KS_FAMILY_DEPTH 32

struct ks_retry {
	pid_t pid;		/* the family's eldest VMM */
	uint64_t start;		/* its start time: a reused pid differs */
	uint64_t next_ns;
	uint64_t backoff_ns;
	char why[200];
};

/* A pid handed out by kvmstats_host__pending(), not inserted yet. */
struct ks_claim {
	pid_t pid;
	pid_t root;		/* its family's eldest VMM */
	uint64_t root_start;
};

/* Parent and start time of @pid (fields 4 and 22 of /proc/PID/stat);
 * start 0 when it is gone. */
static uint64_t proc_stat(pid_t pid, pid_t *ppid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	int parent = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	/* After the comm: state is field 3, starttime field 22. */
	if (!p || sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%*u %*u %*d %*d %*d %*d %*d %*d %llu", &parent,
			 &start) != 2)
		start = 0;
	fclose(f);
	if (ppid)
		*ppid = parent;
	return start;
}

static bool in_list(const pid_t *pids, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

/* The eldest VMM of @pid's family: its farthest ancestor through
 * parents that are VMMs too (in @vmms, or open in the host). */
static pid_t family_root(const struct kvmstats_host *h, const pid_t *vmms,
			 size_t n, pid_t pid, uint64_t *start)
{
	pid_t root = pid, parent;

	*start = proc_stat(pid, &parent);
	for (int depth = 0; depth < KS_FAMILY_DEPTH && parent > 1; depth++) {
		uint64_t pstart;
		pid_t up;

		if (!in_list(vmms, n, parent) && find_pid(h, parent) < 0)
			break;
		pstart = proc_stat(parent, &up);
		if (!pstart)
			break;
		root = parent;
		*start = pstart;
		parent = up;
	}
	return root;
}

/* Forget failures of families whose eldest exited (or whose pid was
 * reused). */
static void prune_retry(struct kvmstats_host *h)
{
	size_t j = 0;

	for (size_t i = 0; i < h->nretry; i++)
		if (proc_stat(h->retry[i].pid, NULL) == h->retry[i].start)
			h->retry[j++] = h->retry[i];
	h->nretry = j;
}

static struct ks_retry *find_retry(struct kvmstats_host *h, pid_t root,
				   uint64_t start)
{
	for (size_t i = 0; i < h->nretry; i++)
		if (h->retry[i].pid == root && h->retry[i].start == start)
			return &h->retry[i];
	return NULL;
}

static void remember_failure(struct kvmstats_host *h,
			     const struct ks_claim *c, const char *why,
			     uint64_t took_ns)
{
	struct ks_retry *rt = find_retry(h, c->root, c->root_start);
	uint64_t first = took_ns > KS_SLOW_OPEN_NS ? KS_RETRY_SLOW_NS :
						     KS_RETRY_FAST_NS;
	void *p;

	if (!rt) {
		p = realloc(h->retry, (h->nretry + 1) * sizeof(*h->retry));
		if (!p)
			return;	/* then it is simply tried again */
		h->retry = p;
		rt = &h->retry[h->nretry++];
		*rt = (struct ks_retry){ .pid = c->root, .start = c->root_start };
	}
	/* A slow failure after quick ones starts at the slow delay. */
	if (rt->backoff_ns < first)
		rt->backoff_ns = first;
	else if (rt->backoff_ns < KS_RETRY_MAX_NS)
		rt->backoff_ns *= 2;
	rt->next_ns = ks_now_ns() + rt->backoff_ns;
	snprintf(rt->why, sizeof(rt->why), "%.*s", (int)sizeof(rt->why) - 1, why);
}

static struct ks_claim *find_claim(struct kvmstats_host *h, pid_t pid)
{
	for (size_t i = 0; i < h->nclaims; i++)
		if (h->claims[i].pid == pid)
			return &h->claims[i];
	return NULL;
}

static bool family_busy(const struct kvmstats_host *h, pid_t root,
			uint64_t start)
{
	for (size_t i = 0; i < h->nclaims; i++)
		if (h->claims[i].root == root && h->claims[i].root_start == start)
			return true;
	return false;
}

/* Is @pid's family due (no failure, or its back-off over)? An explicit
 * pid that is not says so in the host's errors. */
static bool due(struct kvmstats_host *h, const struct ks_claim *c,
		uint64_t now, bool explicit)
{
	struct ks_retry *rt = find_retry(h, c->root, c->root_start);

	if (!rt || now >= rt->next_ns)
		return true;
	if (explicit)
		note_error(h, "pid %d: %s (next try in %llu s)", (int)c->pid,
			   rt->why,
			   (unsigned long long)(rt->next_ns - now) / 1000000000ull + 1);
	return false;
}

static int claim(struct kvmstats_host *h, const struct ks_claim *c)
{
	void *p = realloc(h->claims, (h->nclaims + 1) * sizeof(*h->claims));

	if (!p)
		return -ENOMEM;
	h->claims = p;
	h->claims[h->nclaims++] = *c;
	return 0;
}

/* The order in which VMMs are claimed: those that hold their stats fds
 * (they open in a moment, talking to no one), then the others never
 * tried, then families that failed before, so that VMMs that keep
 * failing, however many, cannot starve a new one. */
enum { CLAIM_HELD, CLAIM_NEW, CLAIM_RETRY, CLAIM_PASSES };

static int claim_pass(const struct kvmstats_host *h, pid_t pid, bool tried)
{
	if (tried)
		return CLAIM_RETRY;
	if ((!h->only || h->only == &ks_source_fd) && fd_probe(NULL, pid))
		return CLAIM_HELD;
	return CLAIM_NEW;
}

/* Claim the due VMMs of @cand (@n of them), at most @max claims in
 * flight (0: no bound); their pids go to @out. */
static int claim_due(struct kvmstats_host *h, const pid_t *cand, size_t n,
		     size_t max, pid_t *out)
{
	uint64_t now = ks_now_ns();
	size_t got = 0;

	for (int pass = 0; pass < CLAIM_PASSES; pass++) {
		for (size_t i = 0; i < n; i++) {
			struct ks_claim c = { .pid = cand[i] };
			bool tried;

			if (max && h->nclaims >= max)
				return (int)got;
			if (find_pid(h, c.pid) >= 0 || find_claim(h, c.pid))
				continue;
			c.root = family_root(h, cand, n, c.pid, &c.root_start);
			tried = find_retry(h, c.root, c.root_start) != NULL;
			if ((pass == CLAIM_RETRY) != tried ||
			    (pass < CLAIM_RETRY && claim_pass(h, c.pid, tried) != pass) ||
			    family_busy(h, c.root, c.root_start) ||
			    !due(h, &c, now, h->o.npids != 0 && pass == CLAIM_RETRY))
				continue;
			if (claim(h, &c))
				return got ? (int)got : -ENOMEM;
			out[got++] = c.pid;
		}
	}
	return (int)got;
}

int kvmstats_host__pending_among(struct kvmstats_host *h, const pid_t *cand,
				 size_t n, size_t max, pid_t **out)
{
	pid_t *pids;
	int got;

	*out = NULL;
	h->errors[0] = 0;
	prune_retry(h);
	if (h->o.npids) {
		cand = h->pids;
		n = h->o.npids;
	}
	if (n && !cand)
		return -EINVAL;
	pids = malloc((n + 1) * sizeof(*pids));
	if (!pids)
		return -ENOMEM;
	got = claim_due(h, cand, n, max, pids);
	if (got <= 0) {
		free(pids);
		return got;
	}
	*out = pids;
	return got;
}

int kvmstats_host__pending(struct kvmstats_host *h, size_t max, pid_t **out)
{
	pid_t *all = NULL;
	int n = 0;

	*out = NULL;
	if (!h->o.npids) {
		n = kvmstats_proc__vmm_pids(&all);
		if (n < 0)
			return n;
	}
	n = kvmstats_host__pending_among(h, all, (size_t)n, max, out);
	free(all);
	return n;
}

struct kvmstats_vmm *kvmstats_host__prepare(const struct kvmstats_host *h,
					    pid_t pid, char *errbuf,
					    size_t errbuf_sz)
{
	char why[256] = "";
	struct kvmstats_vmm *v = open_vmm(h, pid, why, sizeof(why));

	if (!v)
		ks_err(errbuf, errbuf_sz, "%s", why);
	return v;
}

static int insert(struct kvmstats_host *h, struct kvmstats_vmm *v)
{
	void *p = realloc(h->vmms, (h->n + 1) * sizeof(*h->vmms));

	if (!p) {
		kvmstats_vmm__close(v);
		return -ENOMEM;
	}
	v->uid = h->next_uid++;
	v->host = h;
	h->vmms = p;
	h->vmms[h->n++] = v;
	ks_host_changed(h);
	return 1;
}

int kvmstats_host__insert(struct kvmstats_host *h, pid_t pid,
			  struct kvmstats_vmm *v, const char *why,
			  uint64_t took_ns)
{
	struct ks_claim *cp = find_claim(h, pid), c;
	struct ks_retry *rt;

	if (!cp) {
		kvmstats_vmm__close(v);
		return -ENOENT;
	}
	c = *cp;
	*cp = h->claims[--h->nclaims];
	if (v && kvmstats_vmm__pid(v) != pid) {
		kvmstats_vmm__close(v);
		return -EINVAL;
	}
	if (!v) {
		why = why && why[0] ? why : "cannot be opened";
		remember_failure(h, &c, why, took_ns);
		/* A host-wide scan skips VMMs no source serves, quietly. */
		if (h->o.npids)
			note_error(h, "pid %d: %s", (int)pid, why);
		else
			ks_log(h->ctx, KVMSTATS_LOG_INFO, "pid %d: %s", (int)pid, why);
		return 0;
	}
	/* It exited while it was being opened: dropped like the others. */
	if (!kvmstats_vmm__alive(v)) {
		kvmstats_vmm__close(v);
		return 0;
	}
	rt = c.root == pid ? find_retry(h, c.root, c.root_start) : NULL;
	if (rt)
		*rt = h->retry[--h->nretry];
	return insert(h, v);
}

static void refresh_vcpus(struct kvmstats_host *h)
{
	char why[256];
	struct ks_source_args a = { h->ctx, &h->o, why, sizeof(why) };

	for (size_t i = 0; i < h->n; i++) {
		struct kvmstats_vmm *v = h->vmms[i];
		const struct ks_source *s = v->src ? v->src : find_source(v->source);

		if (s && s->refresh && s->refresh(&a, v) < 0)
			ks_log(h->ctx, KVMSTATS_LOG_INFO, "pid %d: refresh: %s",
			       (int)v->pid, why);
		if (v->src)
			mark_levels(v);
	}
	/* A source's refresh adds, drops and replaces readers as it finds
	 * them: whatever it did, the readers kept elsewhere are stale. */
	if (h->n)
		ks_host_changed(h);
}

int kvmstats_host__update(struct kvmstats_host *h)
{
	int dropped = drop_dead(h);

	refresh_vcpus(h);
	return dropped;
}

int kvmstats_host__refresh(struct kvmstats_host *h)
{
	int changes = drop_dead(h), n, err = 0;
	pid_t *pids;

	n = kvmstats_host__pending(h, 0, &pids);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		char why[256] = "";
		uint64_t t0 = ks_now_ns();
		struct kvmstats_vmm *v = NULL;
		int added;

		/* After an error, the rest are given back unopened. */
		if (!err)
			v = kvmstats_host__prepare(h, pids[i], why, sizeof(why));
		added = kvmstats_host__insert(h, pids[i], v, why,
					      ks_now_ns() - t0);
		if (added < 0 && !err)
			err = added;
		changes += added > 0;
	}
	free(pids);
	refresh_vcpus(h);
	return err ? err : changes;
}

int kvmstats_host__sweep(struct kvmstats_host *h)
{
	int failed = 0;

	drop_dead(h);
	h->time_ns = ks_now_ns();
	for (size_t i = 0; i < h->n; i++) {
		struct kvmstats_vmm *v = h->vmms[i];

		for (size_t j = 0; j < v->nvms; j++) {
			struct kvmstats_vm *vm = v->vms[j];

			if (vm->r && kvmstats_reader__sweep(vm->r, h->time_ns))
				failed++;
			for (size_t k = 0; k < vm->nvcpus; k++)
				if (kvmstats_reader__sweep(vm->vcpus[k].r, h->time_ns))
					failed++;
		}
	}
	return failed;
}

uint64_t kvmstats_host__time_ns(const struct kvmstats_host *h)
{
	return h->time_ns;
}

size_t kvmstats_host__num_vmms(const struct kvmstats_host *h)
{
	return h->n;
}

struct kvmstats_vmm *kvmstats_host__vmm(const struct kvmstats_host *h, size_t i)
{
	if (i >= h->n) {
		errno = ENOENT;
		return NULL;
	}
	return h->vmms[i];
}

const char *kvmstats_host__errors(const struct kvmstats_host *h)
{
	return h->errors;
}

bool kvmstats_source__probe(struct kvmstats_ctx *ctx, const char *source,
			    pid_t pid, const struct kvmstats_host_opts *opts)
{
	const struct ks_source *s = find_source(source);
	struct kvmstats_host_opts o;
	struct ks_source_args a = { ctx, &o, NULL, 0 };

	if (!s || ks_opts_copy(&o, sizeof(o), opts))
		return false;
	fill_opts(&o);
	return s->probe ? s->probe(&a, pid) : false;
}
