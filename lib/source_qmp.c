// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The qmp source: QEMU's query-stats and query-stats-schemas (QEMU 7.1+)
 * over the QMP socket found on the VMM's command line or given with
 * --qmp.
 *
 * QEMU up to 8.0 holds no stats fds (it opens them per query), and KVM
 * gives a stats fd only to the process that owns the VM, so for such a
 * QEMU its monitor is the way in. The schemas QEMU reports are mapped to
 * the binary interface's descriptors and encoded into a real image, so a
 * QMP reader has a real schema and every consumer reads it like any other
 * source; when they match this kernel's own descriptors, the kernel's
 * schema itself is used: the layout is then exactly the kernel's, shared
 * with fd readers.
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
 * older each time; after QMP_BUSY_POLLS such polls in a row they fail
 * with EBUSY. The snapshot is guarded by a mutex held only for memory
 * copies, never across I/O.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "qmp.h"

#define MAX_SOCKS 8
/* Polls in a row that found the monitor held by another client before
 * the reads fail with EBUSY rather than serve older and older values. */
#define QMP_BUSY_POLLS 3

/* The latest values of one target, laid out by its schema. */
struct snap {
	uint64_t *data;
	uint64_t *missing;	/* one bit per stat */
};

struct qmp_cpu {
	char *qom_path;
	int index;		/* QEMU's cpu-index */
	pid_t tid;		/* its thread, which created the KVM vCPU */
	bool present;		/* in the last snapshot */
	bool has_reader;	/* main thread only (under the lock) */
	struct snap s;
};

/* One QEMU monitor, shared by the VMM's readers and its poller thread. */
struct qmp_vmm {
	pid_t pid;
	char path[PATH_MAX];	/* the socket, as QEMU or the user named it */
	pid_t path_pid;		/* resolve path as this process sees it, or 0 */
	unsigned int timeout_ms;
	struct kvmstats_schema *vm_schema, *vcpu_schema;
	int cancel_fd;		/* eventfd: cuts the poller's waits short */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Under lock. */
	bool stop, kick;
	bool polling;		/* a poll is under way */
	struct snap vm;
	struct qmp_cpu *cpus;
	size_t ncpus;
	uint64_t time_ns;	/* when the snapshot was taken */
	int err;		/* failure since the last good poll, or 0 */
	unsigned int busy_polls;	/* polls in a row that found it busy */
};

/* A reader's private data: which target of the VMM it reads. */
struct qmp_target {
	struct qmp_vmm *m;
	ssize_t cpu;		/* index in m->cpus, -1 for the VM */
	uint64_t age_ns;
};

/* ---- finding the monitor on QEMU's command line ---------------------- */

/* Value of @key in a QemuOpts string "a,key=value,b" (",," is a comma);
 * key "" asks for the first element when it has no "=". A bare "key"
 * reads as "on". */
static bool opt_get(const char *s, const char *key, char *out, size_t len)
{
	bool first = true;

	while (*s) {
		char item[PATH_MAX];
		size_t n = 0;
		const char *eq;

		for (; *s && n + 1 < sizeof(item); s++) {
			if (*s == ',' && s[1] != ',')
				break;
			if (*s == ',')
				s++;	/* ",," */
			item[n++] = *s;
		}
		item[n] = 0;
		if (*s == ',')
			s++;
		eq = strchr(item, '=');
		if (!*key && first && !eq) {
			snprintf(out, len, "%s", item);
			return true;
		}
		first = false;
		if (!*key)
			continue;
		if (!eq && !strcmp(item, key)) {
			snprintf(out, len, "on");
			return true;
		}
		if (eq && (size_t)(eq - item) == strlen(key) &&
		    !strncmp(item, key, strlen(key))) {
			snprintf(out, len, "%s", eq + 1);
			return true;
		}
	}
	return false;
}

static bool opt_on(const char *s, const char *key)
{
	char v[16];

	return opt_get(s, key, v, sizeof(v)) &&
	       (!strcmp(v, "on") || !strcmp(v, "yes") || !strcmp(v, "true"));
}

/* "-opt" or "--opt". */
static bool is_opt(const char *arg, const char *name)
{
	if (arg[0] != '-')
		return false;
	arg += arg[1] == '-' ? 2 : 1;
	return !strcmp(arg, name);
}

struct cmdline {
	char *buf;
	size_t len;
	const char *argv[4096];
	int argc;
};

static int read_cmdline(pid_t pid, struct cmdline *c)
{
	char path[64];
	unsigned char *buf;
	size_t len;
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = ks_read_all_fd(fd, &buf, &len);
	close(fd);
	if (err)
		return err;
	c->buf = (char *)buf;
	c->len = len;
	c->argc = 0;
	for (size_t i = 0; i < len && c->argc < (int)ARRAY_SIZE(c->argv);) {
		/* The last argument may lack its NUL if the file was cut. */
		if (!memchr(c->buf + i, 0, len - i))
			break;
		c->argv[c->argc++] = c->buf + i;
		i += strlen(c->buf + i) + 1;
	}
	return 0;
}

static bool looks_like_qemu(const struct cmdline *c, pid_t pid)
{
	char path[64], exe[PATH_MAX];
	const char *base;
	ssize_t n;

	if (c->argc) {
		base = strrchr(c->argv[0], '/');
		if (strstr(base ? base + 1 : c->argv[0], "qemu"))
			return true;
	}
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = 0;
	base = strrchr(exe, '/');
	return strstr(base ? base + 1 : exe, "qemu") != NULL;
}

/* "unix:PATH[,server=on,wait=off]" of -qmp: a socket QEMU listens on. */
static bool legacy_unix(const char *val, char *path, size_t len)
{
	if (strncmp(val, "unix:", 5))
		return false;	/* tcp:... and others are not supported */
	if (!opt_get(val + 5, "", path, len) || !*path)
		return false;
	/* Without server=on QEMU is the one that connects. */
	return opt_on(val + 5, "server");
}

/* The path of the listening socket chardev @id, if any. */
static bool chardev_path(const struct cmdline *c, const char *id, char *path,
			 size_t len)
{
	char v[256];

	for (int i = 0; i + 1 < c->argc; i++) {
		const char *val = c->argv[i + 1];

		if (!is_opt(c->argv[i], "chardev"))
			continue;
		if (!opt_get(val, "", v, sizeof(v)) || strcmp(v, "socket"))
			continue;
		if (!opt_get(val, "id", v, sizeof(v)) || strcmp(v, id))
			continue;
		return opt_on(val, "server") && opt_get(val, "path", path, len) &&
		       *path;
	}
	return false;
}

/* The QMP sockets on QEMU's command line, in order: -qmp/-qmp-pretty
 * unix:PATH,server=on, then -chardev socket,id=X,path=PATH,server=on
 * used by -mon chardev=X,mode=control. */
static int find_sockets(const struct cmdline *c, char (*out)[PATH_MAX],
			int max)
{
	char id[256], mode[32];
	int n = 0;

	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		const char *arg = c->argv[i], *val = c->argv[i + 1];

		if ((is_opt(arg, "qmp") || is_opt(arg, "qmp-pretty")) &&
		    legacy_unix(val, out[n], sizeof(out[n])))
			n++;
	}
	for (int i = 0; i + 1 < c->argc && n < max; i++) {
		const char *val = c->argv[i + 1];

		if (!is_opt(c->argv[i], "mon"))
			continue;
		if (!opt_get(val, "mode", mode, sizeof(mode)) ||
		    strcmp(mode, "control"))
			continue;
		if (!opt_get(val, "chardev", id, sizeof(id)) &&
		    !opt_get(val, "", id, sizeof(id)))
			continue;
		if (chardev_path(c, id, out[n], sizeof(out[n])))
			n++;
	}
	return n;
}

/* The sockets to try for @pid; *as_pid gets the pid whose view of the
 * file system the paths are in (0: ours, for --qmp). */
static int candidates(const struct ks_source_args *a, pid_t pid,
		      char (*out)[PATH_MAX], int max, pid_t *as_pid)
{
	const struct kvmstats_host_opts *o = a->opts;
	struct cmdline *c;
	int n = 0;

	if (o->qmp_path && o->npids == 1 && o->pids[0] == pid) {
		snprintf(out[0], sizeof(out[0]), "%s", o->qmp_path);
		*as_pid = 0;
		return 1;
	}
	*as_pid = pid;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (!read_cmdline(pid, c) && looks_like_qemu(c, pid))
		n = find_sockets(c, out, max);
	free(c->buf);
	free(c);
	return n;
}

static bool qmp_probe(const struct ks_source_args *a, pid_t pid)
{
	char (*socks)[PATH_MAX] = calloc(MAX_SOCKS, PATH_MAX);
	bool found = false;
	pid_t as;
	int n = socks ? candidates(a, pid, socks, MAX_SOCKS, &as) : 0;

	/* Cheap: the socket file exists; no connection (QEMU would greet
	 * us, and a busy monitor makes us wait). */
	for (int i = 0; i < n && !found; i++) {
		char full[PATH_MAX + 64];
		struct stat st;

		if (as && socks[i][0] == '/')
			snprintf(full, sizeof(full), "/proc/%d/root%s", (int)as,
				 socks[i]);
		else if (as)
			snprintf(full, sizeof(full), "/proc/%d/cwd/%s", (int)as,
				 socks[i]);
		else
			snprintf(full, sizeof(full), "%s", socks[i]);
		found = !stat(full, &st) && S_ISSOCK(st.st_mode);
	}
	free(socks);
	return found;
}

/* ---- schemas ------------------------------------------------------------ */

static const char *str_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		return NULL;
	return json_object_get_string(v);
}

static int word(const char *s, const char *const *words, int n)
{
	for (int i = 0; s && i < n; i++)
		if (!strcmp(s, words[i]))
			return i;
	return -1;
}

/* QAPI's StatsType and StatsUnit, in the kernel's numbering. */
static const char *const qmp_types[] = {
	"cumulative", "instant", "peak", "linear-histogram", "log2-histogram",
};
static const char *const qmp_units[] = {
	"none", "bytes", "seconds", "cycles", "boolean",
};

/* The "stats" list of the kvm provider in a query-stats or
 * query-stats-schemas result for @target (NULL: any target; @qom_path
 * gets the entry's qom-path). @i is where to start in @results. */
static struct json_object *provider_stats(struct json_object *results,
					  const char *target, size_t *i,
					  const char **qom_path)
{
	size_t n = json_object_is_type(results, json_type_array) ?
			   json_object_array_length(results) : 0;

	for (; *i < n; (*i)++) {
		struct json_object *e = json_object_array_get_idx(results, *i);
		struct json_object *stats;
		const char *p = str_of(e, "provider"), *t = str_of(e, "target");

		if (!p || strcmp(p, "kvm") || (target && (!t || strcmp(t, target))))
			continue;
		if (!json_object_object_get_ex(e, "stats", &stats) ||
		    !json_object_is_type(stats, json_type_array))
			continue;
		if (qom_path)
			*qom_path = str_of(e, "qom-path");
		(*i)++;
		return stats;
	}
	return NULL;
}

/* Number of values of stat @name in a query-stats "stats" list: the
 * length of its array for a histogram (the schema does not say), else 1;
 * 0 when absent. */
static size_t value_size(struct json_object *values, const char *name)
{
	size_t n = values ? json_object_array_length(values) : 0;

	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(values, i);
		struct json_object *v;
		const char *nm = str_of(e, "name");

		if (!nm || strcmp(nm, name) || !json_object_object_get_ex(e, "value", &v))
			continue;
		return json_object_is_type(v, json_type_array) ?
			       json_object_array_length(v) : 1;
	}
	return 0;
}

/* One QMP schema entry as a descriptor; false to leave it out. */
static bool to_desc(struct json_object *e, struct json_object *values,
		    struct kvmstats_encode_desc *d)
{
	struct json_object *v;
	int type = word(str_of(e, "type"), qmp_types, ARRAY_SIZE(qmp_types));
	const char *unit_s = str_of(e, "unit");
	int unit = unit_s ? word(unit_s, qmp_units, ARRAY_SIZE(qmp_units)) : 0;
	int base = KVMSTATS_BASE_POW10;
	size_t size;

	d->name = str_of(e, "name");
	if (!d->name || type < 0 || unit < 0)
		return false;	/* a kind this library cannot express */
	if (json_object_object_get_ex(e, "base", &v) &&
	    json_object_get_int(v) == 2)
		base = KVMSTATS_BASE_POW2;
	d->exponent = json_object_object_get_ex(e, "exponent", &v) ?
			      (int16_t)json_object_get_int(v) : 0;
	d->bucket_size = json_object_object_get_ex(e, "bucket-size", &v) ?
				 (uint32_t)json_object_get_int64(v) : 0;
	d->flags = KVMSTATS_FLAGS(type, unit, base);
	size = value_size(values, d->name);
	if (type == KVMSTATS_TYPE_LINEAR_HIST || type == KVMSTATS_TYPE_LOG_HIST) {
		/* Histogram sizes come only with values. */
		if (!size || size > UINT16_MAX)
			return false;
		d->size = (uint16_t)size;
	} else {
		d->size = 1;
	}
	return true;
}

/* QEMU builds its lists by prepending, so its schemas come in reverse
 * descriptor order. The kernel lists the generic stats first, starting
 * with these; reversing unless the list already starts with one gives the
 * kernel's order (and so the kernel's data layout). */
static bool kernel_order(struct json_object *list)
{
	const char *first = str_of(json_object_array_get_idx(list, 0), "name");

	return first && (!strcmp(first, "remote_tlb_flush") ||
			 !strcmp(first, "halt_successful_poll"));
}

static struct kvmstats_schema *build_schema(struct kvmstats_ctx *ctx,
					    struct json_object *list,
					    struct json_object *values,
					    const char *id, char *err,
					    size_t errsz)
{
	size_t n = json_object_array_length(list), nd = 0, len;
	struct kvmstats_encode_desc *d = calloc(n ? n : 1, sizeof(*d));
	struct kvmstats_schema *s = NULL;
	bool keep = kernel_order(list);
	void *img;

	if (!d)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t j = keep ? i : n - 1 - i;

		if (to_desc(json_object_array_get_idx(list, j), values, &d[nd]))
			nd++;
	}
	img = kvmstats_image__encode(id, d, nd, NULL, &len, NULL);
	if (!img)
		ks_err(err, errsz, "encoding the schema: %s", strerror(errno));
	else
		s = kvmstats_schema__parse(ctx, img, len, err, errsz);
	free(img);
	free(d);
	return s;
}

static bool same_stat(const struct kvmstats_stat *a,
		      const struct kvmstats_stat *b)
{
	return !strcmp(kvmstats_stat__name(a), kvmstats_stat__name(b)) &&
	       kvmstats_stat__flags(a) == kvmstats_stat__flags(b) &&
	       kvmstats_stat__exponent(a) == kvmstats_stat__exponent(b) &&
	       kvmstats_stat__size(a) == kvmstats_stat__size(b) &&
	       kvmstats_stat__bucket_size(a) == kvmstats_stat__bucket_size(b);
}

/* The descriptors QEMU reports do not say where the kernel puts each
 * value (its data block follows its structs, not the descriptor order:
 * max_mmu_rmap_size comes after max_mmu_page_hash_collisions). When they
 * match this kernel's own, take the kernel's schema: the layout is then
 * exactly the kernel's, shared with fd readers. */
static struct kvmstats_schema *prefer_kernel(struct kvmstats_ctx *ctx,
					     struct kvmstats_schema *built,
					     bool vcpu)
{
	struct kvmstats_schema *k[2] = { NULL, NULL }, *ks;
	const struct kvmstats_stat *a, *b;
	bool same;

	if (ks_kernel_schemas(ctx, &k[0], &k[1]))
		return built;	/* no /dev/kvm here: the encoded layout */
	ks = k[vcpu];
	kvmstats_schema__put(k[!vcpu]);
	same = kvmstats_schema__num_stats(ks) == kvmstats_schema__num_stats(built);
	for (a = kvmstats_schema__next(ks, NULL), b = kvmstats_schema__next(built, NULL);
	     same && a && b;
	     a = kvmstats_schema__next(ks, a), b = kvmstats_schema__next(built, b))
		same = same_stat(a, b);
	if (!same) {
		kvmstats_schema__put(ks);
		return built;
	}
	kvmstats_schema__put(built);
	return ks;
}

/* ---- snapshots ---------------------------------------------------------- */

static int snap_alloc(struct snap *s, const struct kvmstats_schema *sc)
{
	size_t words = (kvmstats_schema__num_stats(sc) + 63) / 64;

	s->data = calloc(1, kvmstats_schema__data_size(sc) + 8);
	s->missing = calloc(words + 1, sizeof(uint64_t));
	return s->data && s->missing ? 0 : -ENOMEM;
}

static void snap_free(struct snap *s)
{
	free(s->data);
	free(s->missing);
}

static void set_bit(uint64_t *map, uint32_t i, bool on)
{
	if (on)
		map[i / 64] |= 1ull << (i % 64);
	else
		map[i / 64] &= ~(1ull << (i % 64));
}

static uint64_t value_u64(struct json_object *v)
{
	if (json_object_is_type(v, json_type_boolean))
		return json_object_get_boolean(v) ? 1 : 0;
	return json_object_get_uint64(v);
}

/* One value of a "stats" list into the snapshot; false if it does not fit
 * the stat (a histogram of another size). */
static bool fill_one(const struct kvmstats_stat *st, struct json_object *v,
		     uint64_t *data)
{
	uint64_t *out = data + kvmstats_stat__offset(st) / 8;
	uint32_t size = kvmstats_stat__size(st);

	if (!json_object_is_type(v, json_type_array)) {
		if (size != 1)
			return false;
		*out = value_u64(v);
		return true;
	}
	if (json_object_array_length(v) != size)
		return false;
	for (uint32_t k = 0; k < size; k++)
		out[k] = value_u64(json_object_array_get_idx(v, k));
	return true;
}

/* A query-stats "stats" list into @s; a stat QEMU did not return stays
 * marked missing. Called with the lock held (memory work only). */
static void fill_snap(struct snap *s, const struct kvmstats_schema *sc,
		      struct json_object *values)
{
	uint32_t nst = kvmstats_schema__num_stats(sc);
	size_t n = json_object_array_length(values);

	memset(s->data, 0, kvmstats_schema__data_size(sc));
	for (uint32_t i = 0; i < nst; i++)
		set_bit(s->missing, i, true);
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(values, i);
		const char *name = str_of(e, "name");
		const struct kvmstats_stat *st;
		struct json_object *v;

		if (!name || !json_object_object_get_ex(e, "value", &v))
			continue;
		st = kvmstats_schema__find(sc, name);
		if (st && fill_one(st, v, s->data))
			set_bit(s->missing, kvmstats_stat__index(st), false);
	}
}

/* ---- vCPUs -------------------------------------------------------------- */

static ssize_t find_cpu(const struct qmp_vmm *m, const char *qom_path)
{
	for (size_t i = 0; i < m->ncpus; i++)
		if (!strcmp(m->cpus[i].qom_path, qom_path))
			return (ssize_t)i;
	return -1;
}

/* Index and thread of the vCPU at @qom_path from query-cpus-fast. */
static void cpu_ids(struct json_object *cpus, const char *qom_path, int *index,
		    pid_t *tid)
{
	size_t n = json_object_is_type(cpus, json_type_array) ?
			   json_object_array_length(cpus) : 0;

	for (size_t i = 0; i < n; i++) {
		struct json_object *c = json_object_array_get_idx(cpus, i), *v;
		const char *p = str_of(c, "qom-path");

		if (!p || strcmp(p, qom_path))
			continue;
		if (json_object_object_get_ex(c, "cpu-index", &v))
			*index = json_object_get_int(v);
		if (json_object_object_get_ex(c, "thread-id", &v))
			*tid = (pid_t)json_object_get_int(v);
		return;
	}
}

/* Append a vCPU seen for the first time. Lock held. */
static int add_cpu(struct qmp_vmm *m, const char *qom_path,
		   struct json_object *cpus)
{
	struct qmp_cpu *c;
	void *p = realloc(m->cpus, (m->ncpus + 1) * sizeof(*m->cpus));

	if (!p)
		return -ENOMEM;
	m->cpus = p;
	c = &m->cpus[m->ncpus];
	memset(c, 0, sizeof(*c));
	/* Without query-cpus-fast: in order of appearance, and the VMM's
	 * pid as the creating thread. */
	c->index = (int)m->ncpus;
	c->tid = m->pid;
	cpu_ids(cpus, qom_path, &c->index, &c->tid);
	c->qom_path = strdup(qom_path);
	if (!c->qom_path || snap_alloc(&c->s, m->vcpu_schema)) {
		free(c->qom_path);
		snap_free(&c->s);
		return -ENOMEM;
	}
	m->ncpus++;
	return 0;
}

/* Does a vcpu query-stats result name a vCPU we do not know yet? */
static bool has_new_cpu(const struct qmp_vmm *m, struct json_object *res)
{
	const char *path = NULL;
	size_t i = 0;

	while (provider_stats(res, NULL, &i, &path))
		if (path && find_cpu(m, path) < 0)
			return true;
	return false;
}

/* Publish one poll's results. Lock held; memory work only. */
static int publish(struct qmp_vmm *m, struct json_object *vm_res,
		   struct json_object *vcpu_res, struct json_object *cpus)
{
	struct json_object *stats;
	const char *path = NULL;
	size_t i = 0;
	int err = 0;

	if (m->vm_schema && (stats = provider_stats(vm_res, NULL, &i, NULL)))
		fill_snap(&m->vm, m->vm_schema, stats);
	for (size_t k = 0; k < m->ncpus; k++)
		m->cpus[k].present = false;
	i = 0;
	while (m->vcpu_schema && !err &&
	       (stats = provider_stats(vcpu_res, NULL, &i, &path))) {
		ssize_t c;

		if (!path)
			continue;
		c = find_cpu(m, path);
		if (c < 0) {
			err = add_cpu(m, path, cpus);
			c = (ssize_t)m->ncpus - 1;
		}
		if (err)
			break;
		fill_snap(&m->cpus[c].s, m->vcpu_schema, stats);
		m->cpus[c].present = true;
	}
	m->time_ns = ks_now_ns();
	return err;
}

/* ---- QMP exchanges ---------------------------------------------------- */

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

/* query-stats for the VM and the vCPUs, in one round trip (and
 * query-cpus-fast when @want_cpus or a vCPU is new: a hot-plugged one). */
static int query(struct qmp_vmm *m, struct ks_qmp *q, uint64_t deadline,
		 struct json_object **vm, struct json_object **vcpu,
		 struct json_object **cpus, bool want_cpus, char *err,
		 size_t errsz)
{
	struct ks_qmp_cmd c[2] = {
		{ .cmd = "query-stats", .args = stats_args("vm") },
		{ .cmd = "query-stats", .args = stats_args("vcpu") },
	};
	int e = ks_qmp_batch(q, c, 2, deadline, err, errsz);

	json_object_put(c[0].args);
	json_object_put(c[1].args);
	*vm = c[0].ret;
	*vcpu = c[1].ret;
	if (e)
		return e;
	if (!want_cpus && !has_new_cpu(m, *vcpu))
		return 0;
	/* Optional: ids fall back to order of appearance without it. */
	if (ks_qmp_call(q, "query-cpus-fast", NULL, deadline, cpus, NULL, 0))
		*cpus = NULL;
	return 0;
}

/* ---- the poller ------------------------------------------------------- */

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
	m->busy_polls++;
	if (m->err)
		m->err = -EBUSY;
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

	err = ks_qmp_connect(&q, m->path, m->path_pid, m->cancel_fd, flags,
			     deadline, NULL, 0);
	if (!err)
		err = query(m, q, deadline, &vm, &vcpu, &cpus, false, NULL, 0);
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
	snap_free(&m->vm);
	for (size_t i = 0; i < m->ncpus; i++) {
		free(m->cpus[i].qom_path);
		snap_free(&m->cpus[i].s);
	}
	free(m->cpus);
	kvmstats_schema__put(m->vm_schema);
	kvmstats_schema__put(m->vcpu_schema);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* ---- readers ---------------------------------------------------------- */

static int target_read(void *priv, struct kvmstats_sample *smp,
		       uint64_t *missing)
{
	struct qmp_target *t = priv;
	struct qmp_vmm *m = t->m;
	const struct kvmstats_schema *sc;
	const struct snap *s;
	int err;

	pthread_mutex_lock(&m->lock);
	if (t->cpu < 0) {
		sc = m->vm_schema;
		s = &m->vm;
		err = 0;
	} else {
		sc = m->vcpu_schema;
		s = &m->cpus[t->cpu].s;
		err = m->cpus[t->cpu].present ? 0 : -ENODEV;	/* unplugged */
	}
	if (m->err)
		err = m->err;
	else if (m->busy_polls >= QMP_BUSY_POLLS)
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

static const struct kvmstats_reader_ops qmp_ops = {
	.source = "qmp",
	.read = target_read,
	.close = free,
	.age_ns = target_age,
};

static struct kvmstats_reader *open_target(struct qmp_vmm *m,
					   struct kvmstats_schema *sc,
					   ssize_t cpu, const char *id)
{
	struct qmp_target *t = calloc(1, sizeof(*t));
	struct kvmstats_reader *r;

	if (!t)
		return NULL;
	t->m = m;
	t->cpu = cpu;
	r = kvmstats_reader__open_ops(sc, &qmp_ops, t);
	if (!r) {
		free(t);
		return NULL;
	}
	if (ks_reader_set_id(r, id)) {
		kvmstats_reader__close(r);
		return NULL;
	}
	return r;
}

/* Readers for the vCPUs the poller found and nobody reads yet. The ids
 * are the kernel's: "kvm-TID/vcpu-N", TID being the thread that created
 * the vCPU (query-cpus-fast's thread-id; QEMU creates each vCPU in its
 * own thread) and N QEMU's cpu-index, which is KVM's vcpu_id for the
 * usual topologies (on x86 KVM numbers vCPUs by APIC id, which differs
 * when threads or cores per socket are not a power of two). Without
 * query-cpus-fast the TID falls back to the VMM's pid. */
static int add_readers(struct qmp_vmm *m, struct kvmstats_vm *vm)
{
	int added = 0, err = 0;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		struct qmp_cpu *c = NULL;
		struct kvmstats_reader *r;
		ssize_t i = -1;
		char id[64];

		/* In index order (QEMU lists vCPUs last to first). */
		for (size_t k = 0; k < m->ncpus; k++)
			if (!m->cpus[k].has_reader &&
			    (i < 0 || m->cpus[k].index < m->cpus[i].index))
				i = (ssize_t)k;
		if (i < 0)
			break;
		c = &m->cpus[i];
		snprintf(id, sizeof(id), "kvm-%d/vcpu-%d", (int)c->tid, c->index);
		r = open_target(m, m->vcpu_schema, i, id);
		err = r ? ks_vm_add_vcpu(vm, c->index, -1, r) : -ENOMEM;
		if (err) {
			kvmstats_reader__close(r);
			break;
		}
		c->has_reader = true;
		added++;
	}
	pthread_mutex_unlock(&m->lock);
	return err ? err : added;
}

/* ---- open ------------------------------------------------------------- */

static int connect_any(const struct ks_source_args *a, struct qmp_vmm *m,
		       pid_t pid, uint64_t deadline, struct ks_qmp **q)
{
	char (*socks)[PATH_MAX] = calloc(MAX_SOCKS, PATH_MAX);
	int n, err = -ENOENT;
	pid_t as = 0;

	if (!socks)
		return -ENOMEM;
	n = candidates(a, pid, socks, MAX_SOCKS, &as);
	if (n <= 0)
		ks_err(a->errbuf, a->errbuf_sz,
		       "no QMP socket on its command line (-qmp unix:PATH,"
		       "server=on or -chardev socket + -mon mode=control); "
		       "give one with --qmp");
	/* The first that answers: QEMU may have several, some in use. */
	for (int i = 0; i < n; i++) {
		err = ks_qmp_connect(q, socks[i], as, m->cancel_fd,
				     KS_QMP_CHECK_FIRST, deadline, a->errbuf,
				     a->errbuf_sz);
		if (!err) {
			snprintf(m->path, sizeof(m->path), "%s", socks[i]);
			m->path_pid = as;
			break;
		}
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

static struct qmp_vmm *qmp_vmm_new(pid_t pid, unsigned int timeout_ms)
{
	struct qmp_vmm *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->pid = pid;
	m->timeout_ms = timeout_ms;
	m->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->cancel_fd < 0) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
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

/* Schemas for the VM and vCPUs, sized by a first query-stats. */
static int make_schemas(const struct ks_source_args *a, struct qmp_vmm *m,
			struct json_object *schemas, struct json_object *vm,
			struct json_object *vcpu)
{
	struct json_object *list, *values;
	char id[32];
	size_t i = 0;

	snprintf(id, sizeof(id), "kvm-%d", (int)m->pid);
	list = provider_stats(schemas, "vm", &i, NULL);
	i = 0;
	values = provider_stats(vm, NULL, &i, NULL);
	if (list && values) {
		m->vm_schema = build_schema(a->ctx, list, values, id, a->errbuf,
					    a->errbuf_sz);
		if (m->vm_schema)
			m->vm_schema = prefer_kernel(a->ctx, m->vm_schema, false);
		if (!m->vm_schema || snap_alloc(&m->vm, m->vm_schema))
			return -EPROTO;
	}
	i = 0;
	list = provider_stats(schemas, "vcpu", &i, NULL);
	i = 0;
	values = provider_stats(vcpu, NULL, &i, NULL);
	if (list && values) {
		m->vcpu_schema = build_schema(a->ctx, list, values, id,
					      a->errbuf, a->errbuf_sz);
		if (!m->vcpu_schema)
			return -EPROTO;
		m->vcpu_schema = prefer_kernel(a->ctx, m->vcpu_schema, true);
	}
	if (m->vm_schema || m->vcpu_schema)
		return 0;
	ks_err(a->errbuf, a->errbuf_sz, "QEMU reports no KVM stats over QMP");
	return -ENODATA;
}

/* Everything but the connection: schemas, first snapshot, memory. */
static int first_query(const struct ks_source_args *a, struct qmp_vmm *m,
		       struct ks_qmp *q, struct kvmstats_vmm *v,
		       uint64_t deadline)
{
	struct json_object *schemas = NULL, *vm = NULL, *vcpu = NULL,
			   *cpus = NULL, *args = json_object_new_object();
	char why[200] = "";
	int err;

	json_object_object_add(args, "provider", json_object_new_string("kvm"));
	err = ks_qmp_call(q, "query-stats-schemas", args, deadline, &schemas,
			  why, sizeof(why));
	json_object_put(args);
	if (!err)
		err = query(m, q, deadline, &vm, &vcpu, &cpus, true, why,
			    sizeof(why));
	if (err) {
		/* QEMU before 7.1 has no query-stats. */
		ks_err(a->errbuf, a->errbuf_sz, "QMP %s: %s%s", m->path, why,
		       err == -EREMOTEIO ? " (query-stats needs QEMU 7.1+)" : "");
		goto out;
	}
	err = make_schemas(a, m, schemas, vm, vcpu);
	if (err)
		goto out;
	err = publish(m, vm, vcpu, cpus);
	v->memory_bytes = memory_size(q, deadline);
out:
	json_object_put(schemas);
	json_object_put(vm);
	json_object_put(vcpu);
	json_object_put(cpus);
	return err;
}

static int qmp_open(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct qmp_vmm *m = qmp_vmm_new(v->pid, a->opts->timeout_ms);
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
	v->priv = m;
	v->priv_free = qmp_vmm_free;
	err = connect_any(a, m, v->pid, deadline, &q);
	if (!err)
		err = first_query(a, m, q, v, deadline);
	/* The monitor is the operator's too: held only for this exchange. */
	ks_qmp_close(q);
	if (err)
		return err;	/* host.c frees m through priv_free */
	/* The kernel names a VM after the thread that created it: QEMU's
	 * main thread, whose id is the pid. */
	snprintf(id, sizeof(id), "kvm-%d", (int)v->pid);
	if (m->vm_schema) {
		r = open_target(m, m->vm_schema, -1, id);
		if (!r)
			return -ENOMEM;
	}
	vm = kvmstats_vmm__add_vm(v, r);
	if (!vm) {
		kvmstats_reader__close(r);
		return -ENOMEM;
	}
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
 * vCPU); add their readers. Never talks to QEMU: the poller's data is at
 * most one poll old. */
static int qmp_refresh(const struct ks_source_args *a, struct kvmstats_vmm *v)
{
	struct qmp_vmm *m = v->priv;

	(void)a;
	if (!m || !v->nvms || !m->vcpu_schema)
		return 0;
	return add_readers(m, v->vms[0]);
}

const struct ks_source ks_source_qmp = {
	.name = "qmp",
	.probe = qmp_probe,
	.open = qmp_open,
	.refresh = qmp_refresh,
};
