// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The qmp source: QEMU's query-stats and query-stats-schemas (QEMU 7.1+)
 * over the QMP socket found on the VMM's command line or given with
 * --qmp.
 *
 * QEMU up to 8.0 holds no stats fds (it opens them per query), and KVM
 * gives a stats fd only to the process that owns the VM, so for such a
 * QEMU its monitor is the way in; QEMU 8.1+ holds its vCPUs' stats fds but
 * not its VM's, and its monitor then serves the VM stats alone (vm_only).
 * QMP's stats become real schemas (qmp_schema.c), histograms in the
 * kernel's order (qmp_order.c), vCPUs within what the VMM can have
 * (qmp_cpus.c), from a socket the VMM could use itself (qmp_trust.c).
 *
 * QEMU serves one client per monitor socket, and the operator's own tools
 * (and libvirt, `kvmstats plan`, another kvmstats) need it too: a monitor
 * is held only for one exchange. Open connects, reads the schemas, ids and
 * memory size, and leaves. After that each VMM has a poller thread that,
 * once per poll, connects, runs query-stats for the VM and the vCPUs in
 * one round trip, and leaves: a few milliseconds per poll.
 *
 * A monitor can be busy or hung, and a sweep must never wait on one: every
 * poll has a deadline, and a read copies the poller's latest snapshot
 * (its age reported by age_ns) and asks for a new poll; it never waits
 * for QMP. Polls follow the reads: one per read that finds none under
 * way, none when nobody reads. A monitor another client holds at a poll
 * is tried again at the next one while the reads keep the last values,
 * older each time; after QMP_BUSY_POLLS such polls in a row, once it has
 * been busy for the exchange's timeout (the patience a hung monitor
 * gets), they fail with EBUSY: another kvmstats' poll, or a QEMU slow to
 * close our last connection, costs no reading of a loop that samples
 * faster than that. The snapshot is guarded by a mutex held only for
 * memory copies, never across I/O.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source_qmp.h"

/* Polls in a row that found the monitor held by another client before
 * the reads fail with EBUSY rather than serve older and older values
 * (and not before it was busy for timeout_ms). */
#define QMP_BUSY_POLLS 3

/* One QEMU monitor, shared by the VMM's readers and its poller thread. */
struct qmp_vmm {
	pid_t pid;
	char path[PATH_MAX];	/* the socket, as QEMU or the user named it */
	pid_t path_pid;		/* the process that named it, or 0: the user */
	int pathfd;		/* O_PATH fd of the socket file checked */
	struct stat st;
	unsigned int timeout_ms;
	bool vm_only;		/* the VM stats only: no vCPU is queried */
	char version[32];
	struct ks_hist_order order;
	struct kvmstats_schema *vm_schema, *vcpu_schema;
	size_t vm_cost, vcpu_cost;	/* what json-c may take per result */
	int cancel_fd;		/* eventfd: cuts the poller's waits short */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Under lock. */
	bool stop, kick;
	bool polling;		/* a poll is under way */
	struct snap vm;
	struct qmp_cpus cpus;
	uint64_t time_ns;	/* when the snapshot was taken */
	int err;		/* failure since the last good poll, or 0 */
	unsigned int busy_polls;	/* polls in a row that found it busy */
	uint64_t busy_since_ns;	/* when the first of them did */
};

/* A reader's private data: which target of the VMM it reads. */
struct qmp_target {
	struct qmp_vmm *m;
	struct qmp_cpu *cpu;	/* NULL: the VM */
	uint64_t age_ns;
};

/* ---- finding the monitor ------------------------------------------------ */

/* The sockets to try for @pid; *as_pid gets the process that named them
 * (0: the user, with --qmp). */
static int candidates(const struct ks_source_args *a, pid_t pid,
		      char (*out)[PATH_MAX], int max, pid_t *as_pid)
{
	const struct kvmstats_host_opts *o = a->opts;
	int n;

	if (o->qmp_path && o->npids == 1 && o->pids[0] == pid) {
		snprintf(out[0], sizeof(out[0]), "%s", o->qmp_path);
		*as_pid = 0;
		return 1;
	}
	*as_pid = pid;
	n = ks_qmp_find_sockets(pid, 0, out, max);
	return n < 0 ? 0 : n;
}

/* Cheap: a socket it could use exists; no connection (QEMU would greet
 * us, and a busy monitor makes us wait). */
static bool qmp_probe(const struct ks_source_args *a, pid_t pid)
{
	char (*socks)[PATH_MAX] = calloc(KS_QMP_MAX_SOCKS, PATH_MAX);
	bool found = false;
	pid_t as;
	int n = socks ? candidates(a, pid, socks, KS_QMP_MAX_SOCKS, &as) : 0;

	for (int i = 0; i < n && !found; i++) {
		struct stat st;
		int fd = ks_qmp_sock_open(socks[i], as, &st, NULL, 0);

		found = fd >= 0;
		if (found)
			close(fd);
	}
	free(socks);
	return found;
}

/* ---- polls ---------------------------------------------------------- */

/* Publish one poll's results. Lock held; memory work only. */
static int publish(struct qmp_vmm *m, struct json_object *vm_res,
		   struct json_object *vcpu_res, struct json_object *cpus)
{
	struct json_object *stats;
	size_t i = 0;
	int err = 0;

	if (m->vm_schema && (stats = ks_qmp_provider_stats(vm_res, NULL, &i, NULL)))
		ks_snap_fill(&m->vm, m->vm_schema, stats, m->order.reversed);
	if (m->vcpu_schema && !m->vm_only)
		err = ks_qmp_cpus_update(&m->cpus, m->vcpu_schema, vcpu_res, cpus,
					 m->order.reversed);
	m->time_ns = ks_now_ns();
	return err;
}

static struct json_object *stats_args(const char *target)
{
	struct json_object *a = json_object_new_object();
	struct json_object *provs = json_object_new_array();
	struct json_object *p = json_object_new_object();

	json_object_object_add(p, "provider", json_object_new_string("kvm"));
	json_object_array_add(provs, p);
	json_object_object_add(a, "target", json_object_new_string(target));
	json_object_object_add(a, "providers", provs);
	return a;
}

/* What one VMM's vCPUs may hold, four copies of a data block each (the
 * poller's snapshot, a reader's current and previous samples, one
 * more for the application): a schema of a monitor's may have 16 KiB
 * of data (qmp_schema.c), so 512 vCPUs of those; an x86 vCPU's is
 * 1.1 KiB, so more than any VM has. */
#define QMP_MAX_VCPU_BYTES (32u << 20)
#define QMP_COPIES 4u

/* The vCPUs kept: no more than the VMM's vCPU fds (none has more
 * vCPUs), and no more than QMP_MAX_VCPU_BYTES of their data. */
static unsigned int vcpu_limit(const struct qmp_vmm *m)
{
	unsigned int n = ks_qmp_vcpu_fds(m->pid);
	size_t per = m->vcpu_schema ?
			     QMP_COPIES * (kvmstats_schema__data_size(m->vcpu_schema) + 64) : 0;

	if (per && n > QMP_MAX_VCPU_BYTES / per)
		n = (unsigned int)(QMP_MAX_VCPU_BYTES / per);
	return n;
}

/* query-stats for the VM and the vCPUs, in one round trip (and
 * query-cpus-fast when @want_cpus or a vCPU is new: a hot-plugged one,
 * when the VMM's vCPU fds are counted again too). */
static int query(struct qmp_vmm *m, struct ks_qmp *q, uint64_t deadline,
		 struct json_object **vm, struct json_object **vcpu,
		 struct json_object **cpus, bool want_cpus, char *err,
		 size_t errsz)
{
	struct ks_qmp_cmd c[2] = {
		{ .cmd = "query-stats", .args = stats_args("vm") },
		{ .cmd = "query-stats", .args = stats_args("vcpu") },
	};
	int e = ks_qmp_batch(q, c, m->vm_only ? 1 : 2, deadline, err, errsz);
	unsigned int limit;
	bool news;

	json_object_put(c[0].args);
	json_object_put(c[1].args);
	*vm = c[0].ret;
	*vcpu = c[1].ret;
	if (e || m->vm_only)
		return e;
	pthread_mutex_lock(&m->lock);
	news = ks_qmp_cpus_news(&m->cpus, *vcpu);
	pthread_mutex_unlock(&m->lock);
	if (!want_cpus && !news)
		return 0;
	limit = vcpu_limit(m);
	pthread_mutex_lock(&m->lock);
	m->cpus.limit = limit;
	pthread_mutex_unlock(&m->lock);
	/* Optional: ids fall back to order of appearance without it. */
	if (ks_qmp_call(q, "query-cpus-fast", NULL, deadline, cpus, NULL, 0))
		*cpus = NULL;
	return 0;
}

/* What one answer may take: query-stats of a vCPU is about 2.5 KiB
 * (45 stats, three histograms of 32 buckets), so 16 KiB per vCPU the VMM
 * can have, and 1 MiB for the rest. A monitor saying more is refused. */
static size_t max_answer(unsigned int vcpus)
{
	return (1u << 20) + (size_t)vcpus * (16u << 10);
}

/* What json-c may build for one answer: the VM's result, or one result
 * per vCPU the VMM can have, as their schemas say (query-cpus-fast's
 * entry takes about 2.5 KiB), and 8 MiB for the rest (half a MiB of
 * JSON, as the bytes' budget allows for the rest too). Bytes alone do
 * not bound it: "[[],[],...]" takes 50 times its size. */
static void set_limits(struct ks_qmp *q, const struct qmp_vmm *m,
		       unsigned int vcpus)
{
	size_t per = m->vcpu_cost > 4096 ? m->vcpu_cost : 4096;
	size_t all = per * vcpus;

	ks_qmp_set_max_msg(q, max_answer(vcpus));
	ks_qmp_set_max_cost(q, (8u << 20) + (all > m->vm_cost ? all : m->vm_cost));
}

/* Record a failed poll. Lock held. */
static void poll_failed(struct qmp_vmm *m, int err)
{
	if (err != -EBUSY) {
		m->err = err;
		m->busy_polls = 0;
		return;
	}
	/* The values are kept while they are not too old; a failure seen
	 * before is now this one. */
	if (!m->busy_polls++)
		m->busy_since_ns = ks_now_ns();
	if (m->err)
		m->err = -EBUSY;
}

static int connect_pinned(struct qmp_vmm *m, struct ks_qmp **q,
			  unsigned int flags, uint64_t deadline, char *err,
			  size_t errsz)
{
	return ks_qmp_connect_fd(q, m->pathfd, &m->st, m->path, m->path_pid,
				 m->cancel_fd, flags, deadline, err, errsz);
}

/* One poll: connect, query, leave. The monitor is held for the
 * exchange only, and it all ends by the deadline. */
static void poll_once(struct qmp_vmm *m)
{
	struct json_object *vm = NULL, *vcpu = NULL, *cpus = NULL;
	uint64_t deadline = ks_qmp_deadline(m->timeout_ms);
	/* Found busy last time: look before connecting, so that a monitor
	 * held for long has no queue of our connections. */
	unsigned int flags = KS_QMP_LAZY_CAPS |
			     (m->busy_polls ? KS_QMP_CHECK_FIRST : 0);
	struct ks_qmp *q = NULL;
	int err;

	err = connect_pinned(m, &q, flags, deadline, NULL, 0);
	if (!err) {
		pthread_mutex_lock(&m->lock);
		set_limits(q, m, m->cpus.limit);
		pthread_mutex_unlock(&m->lock);
		err = query(m, q, deadline, &vm, &vcpu, &cpus, false, NULL, 0);
	}
	ks_qmp_close(q);
	pthread_mutex_lock(&m->lock);
	if (!err)
		err = publish(m, vm, vcpu, cpus);
	if (!err) {
		m->err = 0;
		m->busy_polls = 0;
	} else if (err != -ECANCELED) {
		poll_failed(m, err);
	}
	pthread_mutex_unlock(&m->lock);
	json_object_put(vm);
	json_object_put(vcpu);
	json_object_put(cpus);
}

/* Polls once per request: reads ask, so an idle host costs QEMU
 * nothing, and a sweep gets what was fetched after the sweep before. A
 * request made while a poll is under way is the one that poll answers,
 * so the readers of one sweep cause one poll, not one each. */
static void *poller(void *arg)
{
	struct qmp_vmm *m = arg;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->stop && !m->kick)
			pthread_cond_wait(&m->cond, &m->lock);
		if (m->stop)
			break;
		m->kick = false;
		m->polling = true;
		pthread_mutex_unlock(&m->lock);
		poll_once(m);
		pthread_mutex_lock(&m->lock);
		m->polling = false;
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* A poller parses JSON and waits: a small stack will do, and a host of a
 * thousand QEMUs has a thousand pollers. */
#define POLLER_STACK (256u << 10)

static int start_poller(struct qmp_vmm *m)
{
	sigset_t all, old;
	pthread_attr_t attr;
	int err;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, POLLER_STACK);
	/* Signals are the application's: none may land in our thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&m->thread, &attr, poller, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	m->thread_started = !err;
	return err;
}

/* Readers are closed before this (the VMM's VMs go first). */
static void qmp_vmm_free(void *priv)
{
	struct qmp_vmm *m = priv;
	uint64_t one = 1;

	if (!m)
		return;
	if (m->thread_started) {
		pthread_mutex_lock(&m->lock);
		m->stop = true;
		pthread_cond_signal(&m->cond);
		pthread_mutex_unlock(&m->lock);
		/* Cuts a wait on a hung monitor short. */
		if (write(m->cancel_fd, &one, sizeof(one)) < 0)
			(void)0;	/* the counter cannot overflow here */
		pthread_join(m->thread, NULL);
	}
	if (m->cancel_fd >= 0)
		close(m->cancel_fd);
	if (m->pathfd >= 0)
		close(m->pathfd);
	ks_snap_free(&m->vm);
	ks_qmp_cpus_free(&m->cpus);
	kvmstats_schema__put(m->vm_schema);
	kvmstats_schema__put(m->vcpu_schema);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* ---- readers ---------------------------------------------------------- */

/* Held by another client for too long to serve the last values. Lock
 * held. */
static bool busy_too_long(const struct qmp_vmm *m)
{
	return m->busy_polls >= QMP_BUSY_POLLS &&
	       ks_now_ns() - m->busy_since_ns >= m->timeout_ms * 1000000ull;
}

static int target_read(void *priv, struct kvmstats_sample *smp,
		       uint64_t *missing)
{
	struct qmp_target *t = priv;
	struct qmp_vmm *m = t->m;
	const struct kvmstats_schema *sc;
	const struct snap *s;
	int err;

	pthread_mutex_lock(&m->lock);
	if (!t->cpu) {
		sc = m->vm_schema;
		s = &m->vm;
		err = 0;
	} else {
		sc = m->vcpu_schema;
		s = &t->cpu->s;
		err = t->cpu->present ? 0 : -ENODEV;	/* unplugged */
	}
	if (m->err)
		err = m->err;
	else if (busy_too_long(m))
		err = -EBUSY;
	if (!err) {
		memcpy(smp->data, s->data, kvmstats_schema__data_size(sc));
		memcpy(missing, s->missing,
		       (size_t)(kvmstats_schema__num_stats(sc) + 63) / 64 * 8);
		t->age_ns = ks_now_ns() - m->time_ns;
	}
	if (!m->polling) {
		m->kick = true;
		pthread_cond_signal(&m->cond);
	}
	pthread_mutex_unlock(&m->lock);
	return err;
}

static uint64_t target_age(void *priv)
{
	return ((struct qmp_target *)priv)->age_ns;
}

/* A vCPU's reader lets go of it; one the monitor no longer lists goes. */
static void target_close(void *priv)
{
	struct qmp_target *t = priv;
	struct qmp_vmm *m = t->m;

	if (t->cpu) {
		pthread_mutex_lock(&m->lock);
		t->cpu->r = NULL;
		t->cpu->held = false;
		if (!t->cpu->present)
			ks_qmp_cpu_drop(&m->cpus, t->cpu);
		pthread_mutex_unlock(&m->lock);
	}
	free(t);
}

static const struct kvmstats_reader_ops qmp_ops = {
	.source = "qmp",
	.read = target_read,
	.close = target_close,
	.age_ns = target_age,
};

static struct kvmstats_reader *open_target(struct qmp_vmm *m,
					   struct kvmstats_schema *sc,
					   struct qmp_cpu *cpu, const char *id)
{
	struct qmp_target *t = calloc(1, sizeof(*t));
	struct kvmstats_reader *r;

	if (!t)
		return NULL;
	t->m = m;
	r = kvmstats_reader__open_ops(sc, &qmp_ops, t);
	if (!r) {
		free(t);
		return NULL;
	}
	if (ks_reader_set_id(r, id)) {
		kvmstats_reader__close(r);
		return NULL;
	}
	t->cpu = cpu;		/* from here on, closing it lets go of @cpu */
	return r;
}

static int cmp_index(const void *a, const void *b)
{
	const struct qmp_cpu *x = *(struct qmp_cpu *const *)a;
	const struct qmp_cpu *y = *(struct qmp_cpu *const *)b;

	return (x->index > y->index) - (x->index < y->index);
}

/* Readers for the vCPUs the poller found and nobody reads yet, in index
 * order. The ids are the kernel's: "kvm-TID/vcpu-N", TID being the
 * thread that created the vCPU (query-cpus-fast's thread-id; QEMU
 * creates each vCPU in its own thread) and N QEMU's cpu-index, which is
 * KVM's vcpu_id for the usual topologies (on x86 KVM numbers vCPUs by
 * APIC id, which differs when threads or cores per socket are not a
 * power of two). Without query-cpus-fast the TID falls back to the
 * VMM's pid. The vCPUs are claimed under the lock (the poller then keeps
 * them) and their readers made without it. */
static int add_readers(struct qmp_vmm *m, struct kvmstats_vm *vm)
{
	struct qmp_cpu **todo;
	size_t n = 0;
	int added = 0, err = 0;

	pthread_mutex_lock(&m->lock);
	todo = calloc(m->cpus.n + 1, sizeof(*todo));
	for (size_t k = 0; todo && k < m->cpus.n; k++) {
		if (m->cpus.v[k]->held || !m->cpus.v[k]->present)
			continue;
		m->cpus.v[k]->held = true;
		todo[n++] = m->cpus.v[k];
	}
	pthread_mutex_unlock(&m->lock);
	if (!todo)
		return -ENOMEM;
	qsort(todo, n, sizeof(*todo), cmp_index);
	for (size_t k = 0; k < n; k++) {
		struct qmp_cpu *c = todo[k];
		struct kvmstats_reader *r = NULL;
		char id[64];

		snprintf(id, sizeof(id), "kvm-%d/vcpu-%d", (int)c->tid, c->index);
		if (!err)
			r = open_target(m, m->vcpu_schema, c, id);
		if (r && !ks_vm_add_vcpu(vm, c->index, -1, r)) {
			pthread_mutex_lock(&m->lock);
			c->r = r;
			pthread_mutex_unlock(&m->lock);
			added++;
			continue;
		}
		err = -ENOMEM;
		if (r) {
			kvmstats_reader__close(r);	/* lets go of c */
			continue;
		}
		pthread_mutex_lock(&m->lock);
		c->held = false;
		pthread_mutex_unlock(&m->lock);
	}
	free(todo);
	return err ? err : added;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;

	return (x > y) - (x < y);
}

/* Drop the readers of vCPUs the monitor no longer lists (unplugged, or
 * made up by a monitor), in one pass. Returns how many. */
static int drop_gone(struct qmp_vmm *m, struct kvmstats_vm *vm)
{
	struct kvmstats_reader **gone;
	size_t n = 0, keep = 0;
	int dropped = 0;

	pthread_mutex_lock(&m->lock);
	gone = calloc(m->cpus.n + 1, sizeof(*gone));
	for (size_t k = 0; gone && k < m->cpus.n; k++)
		if (m->cpus.v[k]->r && !m->cpus.v[k]->present)
			gone[n++] = m->cpus.v[k]->r;
	pthread_mutex_unlock(&m->lock);
	if (!gone)
		return -ENOMEM;
	qsort(gone, n, sizeof(*gone), cmp_ptr);
	for (size_t i = 0; i < vm->nvcpus; i++) {
		struct kvmstats_reader *r = vm->vcpus[i].r;

		if (n && bsearch(&r, gone, n, sizeof(*gone), cmp_ptr)) {
			kvmstats_reader__close(r);	/* lets go of its vCPU */
			dropped++;
		} else {
			vm->vcpus[keep++] = vm->vcpus[i];
		}
	}
	vm->nvcpus = keep;
	free(gone);
	return dropped;
}

/* ---- open ------------------------------------------------------------- */

/* The first socket that is the VMM's to name and answers (QEMU may have
 * several, some in use). The socket file stays open in m->pathfd: every
 * poll connects to the very file that was checked. */
static int connect_any(const struct ks_source_args *a, struct qmp_vmm *m,
		       pid_t pid, uint64_t deadline, struct ks_qmp **q)
{
	char (*socks)[PATH_MAX] = calloc(KS_QMP_MAX_SOCKS, PATH_MAX);
	int n, err = -ENOENT;
	pid_t as = 0;

	if (!socks)
		return -ENOMEM;
	n = candidates(a, pid, socks, KS_QMP_MAX_SOCKS, &as);
	if (n <= 0)
		ks_err(a->errbuf, a->errbuf_sz,
		       "no QMP socket on its command line (-qmp unix:PATH,"
		       "server=on or -chardev socket + -mon mode=control); "
		       "give one with --qmp");
	for (int i = 0; i < n; i++) {
		snprintf(m->path, sizeof(m->path), "%s", socks[i]);
		m->path_pid = as;
		m->pathfd = ks_qmp_sock_open(socks[i], as, &m->st, a->errbuf,
					     a->errbuf_sz);
		err = m->pathfd;
		if (m->pathfd < 0)
			continue;
		err = connect_pinned(m, q, KS_QMP_CHECK_FIRST, deadline,
				     a->errbuf, a->errbuf_sz);
		if (!err)
			break;
		close(m->pathfd);
		m->pathfd = -1;
	}
	free(socks);
	/* A socket named on the command line but gone or dead. */
	if (as && (err == -ENOENT || err == -ENOTSOCK || err == -ECONNREFUSED) &&
	    a->errbuf) {
		size_t len = strlen(a->errbuf);

		snprintf(a->errbuf + len, a->errbuf_sz - len,
			 " (named on its command line; give the socket with --qmp)");
	}
	return n < 0 ? n : err;
}

static struct qmp_vmm *qmp_vmm_new(pid_t pid, unsigned int timeout_ms,
				   bool vm_only)
{
	struct qmp_vmm *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->pid = pid;
	m->pathfd = -1;
	m->timeout_ms = timeout_ms;
	m->vm_only = vm_only;
	m->cpus.pid = pid;
	m->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->cancel_fd < 0) {
		free(m);
		return NULL;
	}
	ks_mutex_init_pi(&m->lock);
	pthread_cond_init(&m->cond, NULL);
	return m;
}

static uint64_t memory_size(struct ks_qmp *q, uint64_t deadline)
{
	struct json_object *r = NULL, *v;
	uint64_t bytes = 0;

	if (ks_qmp_call(q, "query-memory-size-summary", NULL, deadline, &r,
			NULL, 0))
		return 0;
	/* Boot memory plus hot-plugged DIMMs: the guest's RAM. */
	if (json_object_object_get_ex(r, "base-memory", &v))
		bytes += json_object_get_uint64(v);
	if (json_object_object_get_ex(r, "plugged-memory", &v))
		bytes += json_object_get_uint64(v);
	json_object_put(r);
	return bytes;
}

/* The schema of @target ("vm", "vcpu"), sized by a first query-stats. */
static struct kvmstats_schema *make_schema(const struct ks_source_args *a,
					   struct qmp_vmm *m,
					   struct json_object *schemas,
					   struct json_object *res,
					   const char *target)
{
	struct json_object *list, *values;
	char id[32];
	size_t i = 0;

	snprintf(id, sizeof(id), "kvm-%d", (int)m->pid);
	list = ks_qmp_provider_stats(schemas, target, &i, NULL);
	i = 0;
	values = ks_qmp_provider_stats(res, NULL, &i, NULL);
	if (!list || !values)
		return NULL;
	return ks_qmp_schema(a->ctx, list, values, id, !strcmp(target, "vcpu"),
			     a->errbuf, a->errbuf_sz);
}

static int make_schemas(const struct ks_source_args *a, struct qmp_vmm *m,
			struct json_object *schemas, struct json_object *vm,
			struct json_object *vcpu)
{
	m->vm_schema = make_schema(a, m, schemas, vm, "vm");
	if (m->vm_schema && ks_snap_alloc(&m->vm, m->vm_schema))
		return -ENOMEM;
	if (!m->vm_only)
		m->vcpu_schema = make_schema(a, m, schemas, vcpu, "vcpu");
	if (m->vm_schema || m->vcpu_schema)
		return 0;
	if (!a->errbuf || !a->errbuf[0])
		ks_err(a->errbuf, a->errbuf_sz, "QEMU reports no KVM stats over QMP");
	return -ENODATA;
}

/* The order of QEMU's histogram lists: learnt for this binary before,
 * else checked now against the kernel's readings around the first
 * query (@chk, when there were stats fds to read), else the release's
 * known order. */
static void learn_order(struct kvmstats_ctx *ctx, struct qmp_vmm *m,
			struct ks_hist_check *chk, struct json_object *vcpu,
			struct json_object *cpus)
{
	bool checked;

	ks_ctx_lock(ctx);
	checked = chk && ks_hist_check_end(chk, vcpu, cpus, &m->order);
	ks_ctx_unlock(ctx);
	if (checked)
		return;
	ks_hist_order_of_version(m->version, &m->order);
}

/* Before the schemas are built: what QEMU's descriptors allow. */
static void set_costs(struct qmp_vmm *m, struct json_object *schemas)
{
	size_t i = 0;

	m->vm_cost = ks_qmp_cost_of_list(ks_qmp_provider_stats(schemas, "vm",
							       &i, NULL));
	i = 0;
	m->vcpu_cost = ks_qmp_cost_of_list(ks_qmp_provider_stats(schemas,
								 "vcpu", &i,
								 NULL));
}

/* Everything but the connection: schemas, first snapshot, memory. */
static int first_query(const struct ks_source_args *a, struct qmp_vmm *m,
		       struct ks_qmp *q, struct kvmstats_vmm *v,
		       uint64_t deadline)
{
	struct json_object *schemas = NULL, *vm = NULL, *vcpu = NULL,
			   *cpus = NULL, *args = json_object_new_object();
	struct ks_hist_check *chk = NULL;
	bool known;
	char why[200] = "";
	int err;

	snprintf(m->version, sizeof(m->version), "%s", ks_qmp_version(q));
	m->cpus.limit = vcpu_limit(m);
	/* Two lists of at most QMP_MAX_DESCS descriptors: a few MiB. */
	ks_qmp_set_max_msg(q, max_answer(0));
	ks_qmp_set_max_cost(q, 8u << 20);
	json_object_object_add(args, "provider", json_object_new_string("kvm"));
	err = ks_qmp_call(q, "query-stats-schemas", args, deadline, &schemas,
			  why, sizeof(why));
	json_object_put(args);
	/* The VM stats have no histogram: only the vCPUs need the order. */
	ks_ctx_lock(a->ctx);	/* VMMs are opened on several threads */
	known = ks_hist_order_known(a->ctx, m->pid, &m->order);
	ks_ctx_unlock(a->ctx);
	if (!err && !known && !m->vm_only)
		chk = ks_hist_check_start(a, m->pid);
	if (!err) {
		set_costs(m, schemas);
		set_limits(q, m, m->cpus.limit);
		err = query(m, q, deadline, &vm, &vcpu, &cpus, true, why,
			    sizeof(why));
	}
	if (err) {
		/* QEMU before 7.1 has no query-stats. */
		ks_err(a->errbuf, a->errbuf_sz, "QMP %s: %s%s", m->path, why,
		       err == -EREMOTEIO ? " (query-stats needs QEMU 7.1+)" : "");
		goto out;
	}
	if (!known)
		learn_order(a->ctx, m, chk, vcpu, cpus);
	err = make_schemas(a, m, schemas, vm, vcpu);
	if (err)
		goto out;
	/* The polls keep the costs the descriptors allow: a monitor that
	 * sends values of stats left out is read on, within them. */
	m->cpus.limit = vcpu_limit(m);
	pthread_mutex_lock(&m->lock);
	err = publish(m, vm, vcpu, cpus);
	pthread_mutex_unlock(&m->lock);
	v->memory_bytes = memory_size(q, deadline);
out:
	ks_hist_check_free(chk);
	json_object_put(schemas);
	json_object_put(vm);
	json_object_put(vcpu);
	json_object_put(cpus);
	return err;
}

/* The VM to give the VM reader: with a->vm_only, the VMM's only VM
 * (another source read its vCPUs); else a new one. */
static struct kvmstats_vm *target_vm(const struct ks_source_args *a,
				     struct kvmstats_vmm *v,
				     struct kvmstats_reader *r)
{
	struct kvmstats_vm *vm;

	if (a->vm_only && v->nvms) {
		v->vms[0]->r = r;
		return v->vms[0];
	}
	vm = kvmstats_vmm__add_vm(v, r);
	if (!vm)
		kvmstats_reader__close(r);
	return vm;
}

static int qmp_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct qmp_vmm *m = qmp_vmm_new(v->pid, a->opts->timeout_ms, a->vm_only);
	/* One deadline for the whole open: a hung monitor costs at most
	 * the timeout once. */
	uint64_t deadline = ks_qmp_deadline(a->opts->timeout_ms);
	struct kvmstats_reader *r = NULL;
	struct ks_qmp *q = NULL;
	struct kvmstats_vm *vm;
	char id[32];
	int err;

	if (!m)
		return -ENOMEM;
	if (a->vm_only && v->nvms > 1) {
		qmp_vmm_free(m);
		ks_err(a->errbuf, a->errbuf_sz, "QEMU's monitor knows one VM; "
		       "this process has %zu", v->nvms);
		return -EINVAL;
	}
	err = connect_any(a, m, v->pid, deadline, &q);
	if (!err)
		err = first_query(a, m, q, v, deadline);
	/* The monitor is the operator's too: held only for this exchange. */
	ks_qmp_close(q);
	if (!err && a->vm_only && !m->vm_schema) {
		ks_err(a->errbuf, a->errbuf_sz, "QEMU reports no VM stats over QMP");
		err = -ENODATA;
	}
	if (err) {
		qmp_vmm_free(m);
		return err;
	}
	/* Freed with the VMM from here on (after its readers). */
	ks_vmm_set_priv(v, a->vm_only, m, qmp_vmm_free);
	/* The kernel names a VM after the thread that created it: QEMU's
	 * main thread, whose id is the pid. */
	snprintf(id, sizeof(id), "kvm-%d", (int)v->pid);
	if (m->vm_schema) {
		r = open_target(m, m->vm_schema, NULL, id);
		if (!r)
			return -ENOMEM;
	}
	vm = target_vm(a, v, r);
	if (!vm)
		return -ENOMEM;
	if (m->vcpu_schema) {
		err = add_readers(m, vm);
		if (err < 0)
			return err;
	}
	err = start_poller(m);
	if (err)
		ks_err(a->errbuf, a->errbuf_sz, "starting the QMP poller: %s",
		       strerror(-err));
	return err;
}

/* Hot-plugged vCPUs: the last poll saw them (query-stats lists every
 * vCPU); add their readers, and drop those of vCPUs it no longer lists.
 * Never talks to QEMU: the poller's data is at most one poll old. */
static int qmp_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct qmp_vmm *m = v->priv;
	int dropped;

	(void)a;
	if (!m || !v->nvms || !m->vcpu_schema)
		return 0;
	dropped = drop_gone(m, v->vms[0]);
	if (dropped < 0)
		return dropped;
	return add_readers(m, v->vms[0]);
}

int kvmstats_vmm__qmp_info(const struct kvmstats_vmm *v,
			   struct kvmstats_qmp_info *info)
{
	const struct qmp_vmm *m = NULL;
	struct kvmstats_qmp_info out = { .sz = sizeof(out) };
	size_t sz = info ? info->sz : 0;

	if (v->priv_free == qmp_vmm_free)
		m = v->priv;
	else if (v->vm_priv_free == qmp_vmm_free)
		m = v->vm_priv;
	if (!m || !sz) {
		errno = m ? EINVAL : ENOENT;
		return -errno;
	}
	snprintf(out.qemu_version, sizeof(out.qemu_version), "%s", m->version);
	out.hist_reversed = m->order.reversed;
	out.hist_order_from = m->order.from;
	/* A longer path is cut: the struct has room for the usual ones. */
	snprintf(out.socket, sizeof(out.socket), "%.*s",
		 (int)sizeof(out.socket) - 1, m->path);
	if (sz > sizeof(out))
		sz = sizeof(out);
	memcpy(info, &out, sz);
	info->sz = sz;
	return 0;
}

const struct ks_source ks_source_qmp = {
	.name = "qmp",
	.probe = qmp_probe,
	.open = qmp_open,
	.refresh = qmp_refresh,
	.vm_level = true,
	.one_vm = true,
};
