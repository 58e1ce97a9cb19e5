// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The libvirt source: KVM's stats of a libvirt domain, through libvirt.
 *
 * On a host run by libvirt, libvirtd owns every QEMU's QMP socket, so
 * QMP is closed to us; libvirt 8.9+ relays QEMU's query-stats as
 * virDomainListGetStats(VIR_DOMAIN_STATS_VM | VIR_DOMAIN_STATS_VCPU):
 * "vm.NAME.SUFFIX" and "vcpu.N.NAME.SUFFIX", where SUFFIX says the type
 * (sum: cumulative, cur: instant, max: peak). Histograms are not relayed.
 *
 * Which domain is the VMM? libvirt's read-only API has no pid, so we go
 * from the process to the domain: libvirt always passes -uuid to QEMU,
 * and the domain of that UUID must be active. Two checks guard against a
 * QEMU that merely looks like it (a domain restarted since, another
 * daemon): the "domain-ID-NAME" directory libvirt names on the command
 * line must carry the domain's current ID, and the pid file libvirt
 * keeps for a system domain, when we can read it, must hold this pid.
 *
 * Names, types and values come from libvirt; units, bases and exponents
 * from this kernel's own descriptors when it has the stat (the VMs run on
 * this kernel), else from the name: "_ns" is nanoseconds, anything else
 * has no unit. libvirt shows booleans as booleans.
 *
 * Every libvirt call runs in one thread per VMM, never in the caller's: a
 * read asks that thread for a fresh fetch and waits for it at most the
 * timeout (opts->timeout_ms); once a fetch has overrun it, reads fail at
 * once with ETIMEDOUT until it returns, so a hung daemon costs a sweep
 * one timeout per VMM, once. One fetch serves the VM and all its vCPUs:
 * a reader takes the latest fetch if it has not seen it yet, so a sweep
 * (VM, then vCPUs) costs one round trip per VMM and its readings are
 * consistent with each other.
 */
#include <errno.h>

#include "internal.h"

#ifdef HAVE_LIBVIRT

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libvirt_int.h"

#define DEFAULT_URI KS_LIBVIRT_DEFAULT_URI
#define SYSTEM_RUN "/run/libvirt"

/* Shared by the opener, the readers and the thread; freed by the last. */
struct lv_state {
	atomic_int refs;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	/* Set before the thread starts, constant after. */
	char uri[256];
	char uuid[VIR_UUID_STRING_BUFLEN];
	long dom_id;			/* from the command line, or -1 */
	pid_t pid;
	uint64_t timeout_ns;
	/* Under lock. */
	bool stop, want, busy;
	uint64_t busy_since;		/* when the running fetch started */
	uint64_t gen;			/* fetches completed */
	uint64_t snap_ns;		/* when the latest fetch started */
	int err;			/* of the latest fetch, or connecting */
	virDomainStatsRecordPtr *recs;	/* the latest fetch */
	char why[320];
	char name[128];
	uint64_t memory_bytes;
};

/* What the VMM keeps: the state, and the schemas (which belong to the
 * caller's context, so the thread never holds them). */
struct lv_vmm {
	struct lv_state *st;
	struct kvmstats_schema *vcpu_schema;
};

struct lv_reader {
	struct lv_state *st;
	const struct kvmstats_schema *schema;	/* held by the reader */
	int vcpu;				/* -1: the VM */
	uint64_t seen;				/* gen of the last read */
	uint64_t age_ns;
};

static void lv_put(struct lv_state *st)
{
	if (!st || atomic_fetch_sub(&st->refs, 1) != 1)
		return;
	if (st->recs)
		virDomainStatsRecordListFree(st->recs);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

void ks_libvirt_quiet(void *arg, virErrorPtr err)
{
	(void)arg;
	(void)err;
}

const char *ks_libvirt_error(void)
{
	const char *m = virGetLastErrorMessage();

	return m ? m : "unknown libvirt error";
}

bool ks_libvirt_daemon_here(const char *uri, bool rw)
{
	const char *ro = rw ? "" : "-ro";
	char path[64];

	if (strcmp(uri, DEFAULT_URI))
		return true;
	snprintf(path, sizeof(path), SYSTEM_RUN "/libvirt-sock%s", ro);
	if (!access(path, F_OK))
		return true;
	snprintf(path, sizeof(path), SYSTEM_RUN "/virtqemud-sock%s", ro);
	return !access(path, F_OK);
}

/* ---- the thread: every libvirt call is made here ---- */

/* The pid file libvirt keeps for a domain of the system daemon. */
bool ks_libvirt_pid_disagrees(const char *uri, const char *name, pid_t pid,
			      pid_t *other)
{
	char path[512], buf[32];
	ssize_t n;
	int fd;

	if (strcmp(uri, DEFAULT_URI))
		return false;
	snprintf(path, sizeof(path), SYSTEM_RUN "/qemu/%s.pid", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;		/* not ours to read: trust the UUID */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	*other = (pid_t)atoi(buf);
	return *other > 0 && *other != pid;
}

static int lv_find(struct lv_state *st, virConnectPtr conn, virDomainPtr *out)
{
	virDomainPtr dom = virDomainLookupByUUIDString(conn, st->uuid);
	virDomainInfo info;
	const char *name;
	pid_t other;

	if (!dom) {
		snprintf(st->why, sizeof(st->why), "libvirt knows no domain "
			 "with UUID %s", st->uuid);
		return -ENOENT;
	}
	name = virDomainGetName(dom);
	if (virDomainIsActive(dom) != 1 ||
	    (st->dom_id >= 0 && (long)virDomainGetID(dom) != st->dom_id)) {
		snprintf(st->why, sizeof(st->why), "pid %d is not the QEMU of "
			 "libvirt domain %s (it runs another instance)",
			 (int)st->pid, name ? name : st->uuid);
		goto err;
	}
	if (name && ks_libvirt_pid_disagrees(st->uri, name, st->pid, &other)) {
		snprintf(st->why, sizeof(st->why), "libvirt domain %s runs as "
			 "pid %d, not %d", name, (int)other, (int)st->pid);
		goto err;
	}
	snprintf(st->name, sizeof(st->name), "%s", name ? name : "");
	if (!virDomainGetInfo(dom, &info))
		st->memory_bytes = (uint64_t)info.maxMem * 1024;
	*out = dom;
	return 0;
err:
	virDomainFree(dom);
	return -ESRCH;
}

static int lv_connect(struct lv_state *st, virConnectPtr *conn,
		      virDomainPtr *dom)
{
	*conn = virConnectOpenReadOnly(st->uri);
	if (!*conn) {
		snprintf(st->why, sizeof(st->why), "libvirt %.100s: %.150s",
			 st->uri, ks_libvirt_error());
		return -ECONNREFUSED;
	}
	virConnSetErrorFunc(*conn, NULL, ks_libvirt_quiet);
	return lv_find(st, *conn, dom);
}

static int lv_fetch(virDomainPtr dom, virDomainStatsRecordPtr **recs)
{
	virDomainPtr doms[2] = { dom, NULL };
	int n = virDomainListGetStats(doms, VIR_DOMAIN_STATS_VM |
				      VIR_DOMAIN_STATS_VCPU, recs, 0);

	if (n == 1)
		return 0;
	if (n > 1)
		virDomainStatsRecordListFree(*recs);
	*recs = NULL;
	return n < 0 ? -EIO : -ESRCH;	/* no record: the domain stopped */
}

static void lv_loop(struct lv_state *st, virDomainPtr dom)
{
	virDomainStatsRecordPtr *recs, *old;
	int err;

	pthread_mutex_lock(&st->lock);
	for (;;) {
		while (!st->stop && !st->want)
			pthread_cond_wait(&st->cond, &st->lock);
		if (st->stop)
			break;
		st->want = false;
		st->busy = true;
		st->busy_since = ks_now_ns();
		pthread_mutex_unlock(&st->lock);
		err = lv_fetch(dom, &recs);
		pthread_mutex_lock(&st->lock);
		old = st->recs;
		st->recs = recs;
		st->err = err;
		if (err)
			snprintf(st->why, sizeof(st->why), "%s", ks_libvirt_error());
		st->snap_ns = st->busy_since;
		st->busy = false;
		st->gen++;
		pthread_cond_broadcast(&st->cond);
		pthread_mutex_unlock(&st->lock);
		if (old)
			virDomainStatsRecordListFree(old);
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
}

static void *lv_thread(void *arg)
{
	struct lv_state *st = arg;
	virConnectPtr conn = NULL;
	virDomainPtr dom = NULL;
	int err = lv_connect(st, &conn, &dom);

	pthread_mutex_lock(&st->lock);
	st->busy = false;
	st->err = err;
	if (err)
		st->gen++;	/* the "fetch" that failed */
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	if (!err)
		lv_loop(st, dom);
	if (dom)
		virDomainFree(dom);
	if (conn)
		virConnectClose(conn);
	lv_put(st);
	return NULL;
}

/* ---- the caller's side ---- */

/* Wait, lock held, until a fetch newer than @seen is there or the
 * running one has overrun its time. 0 or -ETIMEDOUT. */
static int lv_wait_newer(struct lv_state *st, uint64_t seen)
{
	uint64_t now = ks_now_ns(), deadline;
	struct timespec ts;

	if (st->gen > seen)
		return 0;
	if (!st->busy) {
		st->want = true;
		pthread_cond_broadcast(&st->cond);
		deadline = now + st->timeout_ns;
	} else {
		deadline = st->busy_since + st->timeout_ns;
	}
	ts.tv_sec = (time_t)(deadline / 1000000000ull);
	ts.tv_nsec = (long)(deadline % 1000000000ull);
	while (st->gen <= seen && !st->stop)
		if (pthread_cond_timedwait(&st->cond, &st->lock, &ts) == ETIMEDOUT)
			break;
	return st->gen > seen ? 0 : -ETIMEDOUT;
}

static uint64_t param_u64(const virTypedParameter *p)
{
	switch (p->type) {
	case VIR_TYPED_PARAM_INT:
		return (uint64_t)(int64_t)p->value.i;
	case VIR_TYPED_PARAM_UINT:
		return p->value.ui;
	case VIR_TYPED_PARAM_LLONG:
		return (uint64_t)p->value.l;
	case VIR_TYPED_PARAM_ULLONG:
		return p->value.ul;
	case VIR_TYPED_PARAM_DOUBLE:
		return (uint64_t)p->value.d;
	case VIR_TYPED_PARAM_BOOLEAN:
		return p->value.b != 0;
	default:
		return 0;
	}
}

/* Type of a KVM stat from libvirt's suffix; -1 for other fields. */
static int suffix_type(const char *sfx)
{
	if (!strcmp(sfx, "sum"))
		return KVMSTATS_TYPE_CUMULATIVE;
	if (!strcmp(sfx, "cur"))
		return KVMSTATS_TYPE_INSTANT;
	if (!strcmp(sfx, "max"))
		return KVMSTATS_TYPE_PEAK;
	return -1;
}

/* Split "vm.NAME.SFX" / "vcpu.N.NAME.SFX": *vcpu (-1 for the VM), the
 * stat's name into @name, and its type; false for any other field. */
static bool parse_field(const char *field, int *vcpu, char *name,
			size_t len, int *type)
{
	const char *rest, *dot;
	char *end;

	if (!strncmp(field, "vm.", 3)) {
		*vcpu = -1;
		rest = field + 3;
	} else if (!strncmp(field, "vcpu.", 5)) {
		long n = strtol(field + 5, &end, 10);

		if (end == field + 5 || *end != '.' || n < 0 || n > 65535)
			return false;
		*vcpu = (int)n;
		rest = end + 1;
	} else {
		return false;
	}
	dot = strrchr(rest, '.');
	if (!dot || dot == rest || (size_t)(dot - rest) >= len)
		return false;
	*type = suffix_type(dot + 1);
	if (*type < 0)
		return false;
	memcpy(name, rest, (size_t)(dot - rest));
	name[dot - rest] = 0;
	return true;
}

/* Fill a reader's data from the latest fetch (lock held). */
static int lv_fill(struct lv_reader *r, const virDomainStatsRecord *rec,
		   struct kvmstats_sample *smp, uint64_t *missing)
{
	uint32_t n = kvmstats_schema__num_stats(r->schema), found = 0;
	char name[KS_ABI_NAME_SIZE];

	memset(smp->data, 0, smp->size);
	for (uint32_t i = 0; i < n; i++)
		missing[i / 64] |= 1ull << (i % 64);
	for (int i = 0; i < rec->nparams; i++) {
		const virTypedParameter *p = &rec->params[i];
		const struct kvmstats_stat *st;
		int vcpu, type;
		uint32_t idx;

		if (!parse_field(p->field, &vcpu, name, sizeof(name), &type) ||
		    vcpu != r->vcpu)
			continue;
		st = kvmstats_schema__find(r->schema, name);
		if (!st || (int)kvmstats_stat__type(st) != type)
			continue;
		idx = kvmstats_stat__index(st);
		smp->data[kvmstats_stat__offset(st) / 8] = param_u64(p);
		missing[idx / 64] &= ~(1ull << (idx % 64));
		found++;
	}
	/* Nothing at all: an unplugged vCPU. */
	return found ? 0 : -ENODATA;
}

static int lv_read(void *priv, struct kvmstats_sample *smp, uint64_t *missing)
{
	struct lv_reader *r = priv;
	struct lv_state *st = r->st;
	int err;

	pthread_mutex_lock(&st->lock);
	err = lv_wait_newer(st, r->seen);
	if (!err) {
		/* Consumed, even when it failed: the next read fetches anew. */
		r->seen = st->gen;
		err = st->err;
	}
	if (!err && !st->recs)
		err = -ENODATA;
	if (!err) {
		r->age_ns = ks_now_ns() - st->snap_ns;
		err = lv_fill(r, st->recs[0], smp, missing);
	}
	pthread_mutex_unlock(&st->lock);
	return err;
}

static uint64_t lv_age(void *priv)
{
	return ((struct lv_reader *)priv)->age_ns;
}

static void lv_reader_close(void *priv)
{
	struct lv_reader *r = priv;

	lv_put(r->st);
	free(r);
}

static const struct kvmstats_reader_ops lv_ops = {
	.source = "libvirt",
	.read = lv_read,
	.close = lv_reader_close,
	.age_ns = lv_age,
};

/* Stop the thread: join it when it ends within the timeout, else let it
 * go (a hung daemon) and free the state when its call returns. */
static void lv_stop(struct lv_state *st)
{
	uint64_t now = ks_now_ns(), end = now + st->timeout_ns;
	struct timespec ts;

	pthread_mutex_lock(&st->lock);
	st->stop = true;
	/* A call that already overran its time gets no more of ours. */
	if (st->busy)
		end = st->busy_since + st->timeout_ns;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	if (end <= now) {
		pthread_detach(st->thread);
		return;
	}
	/* timedjoin takes CLOCK_REALTIME. */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)((end - now) / 1000000000ull);
	ts.tv_nsec += (long)((end - now) % 1000000000ull);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_timedjoin_np(st->thread, NULL, &ts))
		pthread_detach(st->thread);
}

static void lv_vmm_free(void *priv)
{
	struct lv_vmm *lv = priv;

	if (!lv)
		return;
	lv_stop(lv->st);
	lv_put(lv->st);
	kvmstats_schema__put(lv->vcpu_schema);
	free(lv);
}

/* ---- schemas from the names of the first fetch ---- */

struct lv_descs {
	struct kvmstats_encode_desc *d;
	char (*names)[KS_ABI_NAME_SIZE];
	size_t n, cap;
};

static bool descs_have(const struct lv_descs *ds, const char *name)
{
	for (size_t i = 0; i < ds->n; i++)
		if (!strcmp(ds->names[i], name))
			return true;
	return false;
}

/* The descriptor of @name: this kernel's when it has the stat with the
 * same type, else guessed from the name. */
static struct kvmstats_encode_desc guess_desc(const struct kvmstats_schema *k,
					      const char *name, int type,
					      bool boolean)
{
	const struct kvmstats_stat *st = k ? kvmstats_schema__find(k, name) : NULL;
	size_t len = strlen(name);
	unsigned int unit = KVMSTATS_UNIT_NONE;
	int16_t exp = 0;

	if (st && (int)kvmstats_stat__type(st) == type &&
	    kvmstats_stat__size(st) == 1)
		return (struct kvmstats_encode_desc){
			.flags = kvmstats_stat__flags(st),
			.exponent = (int16_t)kvmstats_stat__exponent(st),
		};
	if (boolean && type != KVMSTATS_TYPE_CUMULATIVE) {
		unit = KVMSTATS_UNIT_BOOLEAN;
	} else if (len > 3 && !strcmp(name + len - 3, "_ns")) {
		unit = KVMSTATS_UNIT_SECONDS;
		exp = -9;
	}
	return (struct kvmstats_encode_desc){
		.flags = KVMSTATS_FLAGS(type, unit, KVMSTATS_BASE_POW10),
		.exponent = exp,
	};
}

static int descs_add(struct lv_descs *ds, const struct kvmstats_schema *k,
		     const char *name, int type, bool boolean)
{
	if (descs_have(ds, name))
		return 0;
	if (ds->n == ds->cap) {
		size_t cap = ds->cap ? 2 * ds->cap : 64;
		void *p1 = realloc(ds->d, cap * sizeof(*ds->d));
		void *p2;

		if (!p1)
			return -ENOMEM;
		ds->d = p1;
		p2 = realloc(ds->names, cap * sizeof(*ds->names));
		if (!p2)
			return -ENOMEM;
		ds->names = p2;
		ds->cap = cap;
	}
	snprintf(ds->names[ds->n], sizeof(ds->names[0]), "%s", name);
	ds->d[ds->n] = guess_desc(k, name, type, boolean);
	ds->n++;
	return 0;
}

static struct kvmstats_schema *descs_schema(struct kvmstats_ctx *ctx,
					    struct lv_descs *ds)
{
	struct kvmstats_schema *s;
	size_t len;
	void *img;

	if (!ds->n) {
		errno = ENOENT;
		return NULL;
	}
	for (size_t i = 0; i < ds->n; i++)
		ds->d[i].name = ds->names[i];
	img = kvmstats_image__encode("kvm-libvirt", ds->d, ds->n, NULL, &len,
				     NULL);
	if (!img)
		return NULL;
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	return s;
}

/* VM and vCPU schemas, and a bitmap of the vCPU indexes seen. */
static int build_schemas(struct kvmstats_ctx *ctx,
			 const virDomainStatsRecord *rec,
			 struct kvmstats_schema **vm, struct kvmstats_schema **vcpu)
{
	struct kvmstats_schema *kvm = NULL, *kvcpu = NULL;
	struct lv_descs dvm = { 0 }, dvcpu = { 0 };
	char name[KS_ABI_NAME_SIZE];
	int err = 0;

	/* Units from this kernel when we may create a VM; names suffice. */
	ks_kernel_schemas(ctx, &kvm, &kvcpu);
	for (int i = 0; i < rec->nparams && !err; i++) {
		const virTypedParameter *p = &rec->params[i];
		bool b = p->type == VIR_TYPED_PARAM_BOOLEAN;
		int idx, type;

		if (!parse_field(p->field, &idx, name, sizeof(name), &type))
			continue;
		if (idx < 0)
			err = descs_add(&dvm, kvm, name, type, b);
		else
			err = descs_add(&dvcpu, kvcpu, name, type, b);
	}
	if (!err) {
		*vm = descs_schema(ctx, &dvm);
		*vcpu = dvcpu.n ? descs_schema(ctx, &dvcpu) : NULL;
		if (!*vm || (dvcpu.n && !*vcpu))
			err = -errno;
	}
	free(dvm.d);
	free(dvm.names);
	free(dvcpu.d);
	free(dvcpu.names);
	kvmstats_schema__put(kvm);
	kvmstats_schema__put(kvcpu);
	return err;
}

/* ---- the process's command line ---- */

/* The UUID libvirt gave QEMU (-uuid) and the domain ID in the
 * "domain-ID-NAME" directory it names (-1 when absent). */
int ks_libvirt_cmdline(pid_t pid, char *uuid, size_t len, long *dom_id)
{
	char path[64], *buf, *end, *p;
	size_t cap = 65536;
	ssize_t n;
	int fd, err = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	buf = malloc(cap + 1);
	n = buf ? read(fd, buf, cap) : -1;
	close(fd);
	if (n <= 0) {
		free(buf);
		return -EIO;
	}
	buf[n] = 0;
	*dom_id = -1;
	for (p = buf; p < buf + n; p += strlen(p) + 1) {
		char *d = strstr(p, "/domain-");

		if (d && *dom_id < 0) {
			long id = strtol(d + 8, &end, 10);

			if (end != d + 8 && *end == '-')
				*dom_id = id;
		}
		if (!strcmp(p, "-uuid") && p + strlen(p) + 1 < buf + n) {
			snprintf(uuid, len, "%s", p + strlen(p) + 1);
			err = 0;
		}
	}
	free(buf);
	return err;
}

static const char *uri_of(const struct ks_source_args *a)
{
	return a->opts->libvirt_uri ? a->opts->libvirt_uri : DEFAULT_URI;
}

/* Cheap: QEMU started by libvirt (-uuid), and for the system daemon, its
 * read-only socket exists. Never connects. */
static bool libvirt_probe(const struct ks_source_args *a, pid_t pid)
{
	char uuid[VIR_UUID_STRING_BUFLEN];
	long id;

	if (ks_libvirt_cmdline(pid, uuid, sizeof(uuid), &id))
		return false;
	return ks_libvirt_daemon_here(uri_of(a), false);
}

static struct lv_state *lv_new(const struct ks_source_args *a, pid_t pid)
{
	struct lv_state *st = calloc(1, sizeof(*st));
	pthread_condattr_t ca;

	if (!st)
		return NULL;
	atomic_init(&st->refs, 1);
	ks_mutex_init_pi(&st->lock);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->cond, &ca);
	pthread_condattr_destroy(&ca);
	snprintf(st->uri, sizeof(st->uri), "%s", uri_of(a));
	st->pid = pid;
	st->timeout_ns = (uint64_t)a->opts->timeout_ms * 1000000ull;
	st->want = true;	/* the first fetch, right after connecting */
	st->busy = true;	/* connecting is the first call */
	st->busy_since = ks_now_ns();
	return st;
}

/* Start the thread and wait for it to connect and fetch once. */
static int lv_start(const struct ks_source_args *a, struct lv_state *st)
{
	int err;

	atomic_fetch_add(&st->refs, 1);		/* the thread's */
	err = pthread_create(&st->thread, NULL, lv_thread, st);
	if (err) {
		atomic_fetch_sub(&st->refs, 1);
		ks_err(a->errbuf, a->errbuf_sz, "libvirt: thread: %s", strerror(err));
		return -err;
	}
	pthread_mutex_lock(&st->lock);
	err = lv_wait_newer(st, 0);
	if (!err)
		err = st->err;
	if (err == -ETIMEDOUT)
		ks_err(a->errbuf, a->errbuf_sz, "libvirt %s did not answer "
		       "within %u ms", st->uri, a->opts->timeout_ms);
	else if (err)
		ks_err(a->errbuf, a->errbuf_sz, "%s", st->why);
	pthread_mutex_unlock(&st->lock);
	return err;
}

/* The thread that runs vCPU @index: QEMU creates each vCPU in its own
 * thread, which libvirt has it name "CPU N/KVM" (debug-threads=on); the
 * kernel's id of the vCPU names that thread. */
static pid_t vcpu_tid(pid_t pid, int index)
{
	char path[320], comm[32], want[32];
	struct dirent *de;
	pid_t tid = pid;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	snprintf(want, sizeof(want), "CPU %d/KVM\n", index);
	dir = opendir(path);
	if (!dir)
		return pid;
	while ((de = readdir(dir))) {
		ssize_t n;
		int fd;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid,
			 de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		comm[n > 0 ? n : 0] = 0;
		if (!strcmp(comm, want)) {
			tid = (pid_t)atoi(de->d_name);
			break;
		}
	}
	closedir(dir);
	return tid;
}

static struct kvmstats_reader *lv_reader_open(struct lv_state *st,
					      struct kvmstats_schema *s,
					      int vcpu)
{
	struct lv_reader *r = calloc(1, sizeof(*r));
	struct kvmstats_reader *rd;
	char id[KS_ABI_NAME_SIZE];

	if (!r)
		return NULL;
	r->st = st;
	r->schema = s;
	r->vcpu = vcpu;
	rd = kvmstats_reader__open_ops(s, &lv_ops, r);
	if (!rd) {
		free(r);
		return NULL;
	}
	atomic_fetch_add(&st->refs, 1);
	/* The ids the kernel gives: QEMU creates the VM in its main thread. */
	if (vcpu < 0)
		snprintf(id, sizeof(id), "kvm-%d", (int)st->pid);
	else
		snprintf(id, sizeof(id), "kvm-%d/vcpu-%d",
			 (int)vcpu_tid(st->pid, vcpu), vcpu);
	if (ks_reader_set_id(rd, id)) {
		kvmstats_reader__close(rd);
		return NULL;
	}
	return rd;
}

static bool have_vcpu(const struct kvmstats_vm *vm, int index)
{
	for (size_t i = 0; i < vm->nvcpus; i++)
		if (vm->vcpus[i].index == index)
			return true;
	return false;
}

/* Add readers for the vCPUs of the latest fetch that have none. */
static int add_vcpus(struct kvmstats_vmm *v, struct kvmstats_vm *vm)
{
	struct lv_vmm *lv = v->priv;
	struct lv_state *st = lv->st;
	int added = 0, err = 0, want[256], n = 0;
	char name[KS_ABI_NAME_SIZE];

	if (!lv->vcpu_schema)
		return 0;
	pthread_mutex_lock(&st->lock);
	for (int i = 0; st->recs && i < st->recs[0]->nparams; i++) {
		int idx, type;

		if (!parse_field(st->recs[0]->params[i].field, &idx, name,
				 sizeof(name), &type) || idx < 0 ||
		    have_vcpu(vm, idx) || (n && want[n - 1] == idx) ||
		    n == (int)ARRAY_SIZE(want))
			continue;
		want[n++] = idx;
	}
	pthread_mutex_unlock(&st->lock);
	for (int i = 0; i < n && !err; i++) {
		struct kvmstats_reader *r;

		if (have_vcpu(vm, want[i]))
			continue;
		r = lv_reader_open(st, lv->vcpu_schema, want[i]);
		err = r ? ks_vm_add_vcpu(vm, want[i], -1, r) : -ENOMEM;
		if (err)
			kvmstats_reader__close(r);
		added += !err;
	}
	return err ? err : added;
}

static int libvirt_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct kvmstats_schema *vms = NULL;
	struct kvmstats_reader *r;
	struct kvmstats_vm *vm;
	struct lv_state *st;
	struct lv_vmm *lv;
	int err;

	st = lv_new(a, v->pid);
	lv = calloc(1, sizeof(*lv));
	if (!st || !lv) {
		free(st);
		free(lv);
		return -ENOMEM;
	}
	err = ks_libvirt_cmdline(v->pid, st->uuid, sizeof(st->uuid), &st->dom_id);
	if (err) {
		ks_err(a->errbuf, a->errbuf_sz, "pid %d was not started by "
		       "libvirt (no -uuid on its command line)", (int)v->pid);
		lv_put(st);
		free(lv);
		return err;
	}
	lv->st = st;
	/* With a->vm_only, the VM stats of a VMM another source reads. */
	ks_vmm_set_priv(v, a->vm_only, lv, lv_vmm_free);
	err = lv_start(a, st);
	if (err)
		return err;	/* the host frees lv */
	pthread_mutex_lock(&st->lock);
	err = st->recs ? build_schemas(a->ctx, st->recs[0], &vms,
				       &lv->vcpu_schema) : -ENODATA;
	snprintf(v->name, sizeof(v->name), "%s", st->name);
	v->memory_bytes = st->memory_bytes;
	pthread_mutex_unlock(&st->lock);
	if (err) {
		ks_err(a->errbuf, a->errbuf_sz, "libvirt reports no KVM stats "
		       "for domain %s (libvirt 8.9+ and QEMU 7.1+ do)", v->name);
		return err;
	}
	r = lv_reader_open(st, vms, -1);
	kvmstats_schema__put(vms);
	if (r && a->vm_only && v->nvms) {
		v->vms[0]->r = r;	/* QEMU's one VM */
		return 0;
	}
	vm = r ? kvmstats_vmm__add_vm(v, r) : NULL;
	if (!vm) {
		kvmstats_reader__close(r);
		return -ENOMEM;
	}
	if (a->vm_only)
		return 0;
	err = add_vcpus(v, vm);
	return err < 0 ? err : 0;
}

/* Hot-plugged vCPUs show up in the next fetch. */
static int libvirt_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	(void)a;
	if (!v->priv || !v->nvms)
		return 0;
	return add_vcpus(v, v->vms[0]);
}

const struct ks_source ks_source_libvirt = {
	.name = "libvirt",
	.probe = libvirt_probe,
	.open = libvirt_open,
	.refresh = libvirt_refresh,
	.vm_level = true,
	.one_vm = true,
};

#else /* !HAVE_LIBVIRT */

static int libvirt_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	(void)v;
	ks_err(a->errbuf, a->errbuf_sz, "kvmstats was built without libvirt");
	return -EOPNOTSUPP;
}

const struct ks_source ks_source_libvirt = {
	.name = "libvirt",
	.open = libvirt_open,
};

#endif
