// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The plan for one VM: gathers the model's inputs (the RAM, the zero
 * estimates, the dirty curve, QEMU's migration settings and the caller's
 * overrides), runs the model (migrate_model.c) and keeps the result.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

/* ---- the plan ---- */

struct kvmstats_plan {
	struct kvmstats_plan_opts o;
	struct kvmstats_scan_opts scan;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_dirty *dirty;
	struct kvmstats_plan_vm res;
	struct kvmstats_migrate_settings base;	/* before the options */
	struct kvmstats_migrate_settings mig;
	struct kvmstats_migrate_overrides ov;
	struct kvmstats_migrate_detail detail;
	uint64_t t0;
	uint32_t extra;		/* dirty-rate intervals added (dirty_extend) */
	/* The VMM's CPU time (ns) at the dirty rate's start and last point,
	 * and when it was read; cpu_at[0] 0: not read. */
	uint64_t cpu_ns[2], cpu_at[2];
	bool tail_read;		/* the first pass's end (res.tail) */
};

static int fail(struct kvmstats_plan *p, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct kvmstats_plan *p, int err, const char *fmt, ...)
{
	va_list ap;

	if (p->res.error)
		return err;
	p->res.error = err;
	va_start(ap, fmt);
	vsnprintf(p->res.error_msg, sizeof(p->res.error_msg), fmt, ap);
	va_end(ap);
	return err;
}

/* "QEMU 10.0's defaults" when its executable named the version, else
 * "QEMU's defaults" (7.2's are taken), and why the version is unknown. */
static const char *defaults_of(const struct kvmstats_migrate_settings *s,
			       const char *why, char *buf, size_t len)
{
	if (s->qemu_major)
		snprintf(buf, len, "QEMU %u.%u's defaults", s->qemu_major,
			 s->qemu_minor);
	else
		snprintf(buf, len, "QEMU's defaults%s%.60s%s", why[0] ? " (" : "",
			 why, why[0] ? ")" : "");
	return buf;
}

/* What libvirt says of a domain whose monitor it holds, over QEMU's
 * defaults; and the note that says where the settings came from. */
static void libvirt_base(struct kvmstats_plan *p, unsigned int timeout_ms,
			 const char *exe_why)
{
	struct ks_libvirt_mig lv;
	char *note = p->res.settings_note, buf[96];
	size_t len = sizeof(p->res.settings_note);
	int err = ks_migrate_libvirt(p->res.pid, p->o.libvirt_uri, timeout_ms,
				     p->o.libvirt_guard, &p->base, &lv);
	const char *dflt = defaults_of(&p->base, exe_why, buf, sizeof(buf));

	if (err == -ENOENT && !lv.why[0])
		snprintf(note, len, "QEMU's monitor was not read (%.100s): %.90s",
			 kvmstats_ram__note(p->ram), dflt);
	else if (err)
		snprintf(note, len, "QEMU's monitor was not read and libvirt "
			 "did not say (%.100s): %.90s",
			 lv.why[0] ? lv.why : strerror(-err), dflt);
	else if (lv.speed_unlimited)
		snprintf(note, len, "libvirt's migration speed is unlimited (its "
			 "default: the link decides, not known here): taken as "
			 "QEMU's default, --bandwidth gives the link's%s%.80s",
			 lv.why[0] ? "; " : "", lv.why);
	else
		snprintf(note, len, "libvirt holds QEMU's monitor: its migration "
			 "speed, %.90s for the rest (--downtime gives "
			 "the limit)%s%.60s", dflt, lv.why[0] ? "; " : "", lv.why);
}

/* The settings before the options: QEMU's (over QMP), else libvirt's
 * where it holds the monitor, over the defaults of the version QEMU's
 * executable names. */
static void read_base(struct kvmstats_plan *p, unsigned int timeout_ms)
{
	char why[64] = "";

	if (kvmstats_ram__max_bandwidth(p->ram) || p->ram->mig_read) {
		p->base = p->ram->mig;
		return;
	}
	memset(&p->base, 0, sizeof(p->base));
	/* The file is read from the page cache in ms (1.5 ms for 7.2's
	 * 18 MB here); a cold disk gets the question's timeout. */
	ks_qemu_exe_version(p->res.pid,
			    ks_now_ns() + (uint64_t)(timeout_ms ? timeout_ms : 1000) * 1000000,
			    &p->base, why, sizeof(why));
	ks_migrate_defaults(&p->base);
	libvirt_base(p, timeout_ms, why);
}

/* The settings: read_base()'s, the options over them. */
static void pick_link(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;
	struct kvmstats_migrate_overrides ov = p->ov;

	p->mig = p->base;
	if (p->o.bandwidth > 0)
		ov.bandwidth = p->o.bandwidth;
	if (p->o.downtime_ms > 0)
		ov.downtime_ms = p->o.downtime_ms;
	ks_migrate_override(&p->mig, &ov);
	r->bandwidth = p->mig.bandwidth;
	r->bandwidth_source = kvmstats_mig_src_str(p->mig.src[KVMSTATS_MIG_BANDWIDTH]);
	r->downtime_s = p->mig.downtime_s;
}

int kvmstats_plan__set_overrides(struct kvmstats_plan *p,
				 const struct kvmstats_migrate_overrides *o)
{
	int err = ks_opts_copy(&p->ov, sizeof(p->ov), o);

	if (err)
		return err;
	pick_link(p);
	return 0;
}

const struct kvmstats_migrate_settings *kvmstats_plan__settings(const struct kvmstats_plan *p)
{
	return &p->mig;
}

const struct kvmstats_migrate_detail *kvmstats_plan__detail(const struct kvmstats_plan *p)
{
	return &p->detail;
}

/* Say plainly what is on but not modelled. */
static void not_modelled(struct kvmstats_plan *p)
{
	const struct kvmstats_migrate_settings *s = &p->mig;
	char *b = p->detail.not_modelled;
	size_t len = sizeof(p->detail.not_modelled), k = 0;
	const char *what[] = {
		s->xbzrle ? "xbzrle (its delta encoding)" : NULL,
		s->multifd && s->compress == KVMSTATS_MIG_COMPRESS_OTHER ?
			"this multifd-compression (taken as none)" : NULL,
	};

	b[0] = 0;
	for (size_t i = 0; i < ARRAY_SIZE(what); i++) {
		int n;

		if (!what[i] || k >= len)
			continue;
		n = snprintf(b + k, len - k, "%s%s", k ? "; " : "", what[i]);
		k += n > 0 ? (size_t)n : 0;
	}
}

struct kvmstats_plan *kvmstats_plan__new(pid_t pid, const struct kvmstats_plan_opts *opts,
					 char *errbuf, size_t errbuf_sz)
{
	struct kvmstats_ram_opts ro;
	struct kvmstats_plan *p = calloc(1, sizeof(*p));
	char why[64];
	int err = p ? ks_opts_copy(&p->o, sizeof(p->o), opts) : -ENOMEM;

	if (!err)
		err = ks_opts_copy(&ro, sizeof(ro), p->o.ram);
	if (!err)
		err = ks_opts_copy(&p->scan, sizeof(p->scan), p->o.scan);
	if (err)
		goto err;
	p->scan.sz = sizeof(p->scan);	/* it was zero-filled when NULL */
	p->t0 = ks_now_ns();
	if (!p->o.methods)
		p->o.methods = 1u << KVMSTATS_METHOD_SCAN;
	/* Say so of a process that is no VMM (pid 1, a typo), rather than
	 * that its memory holds nothing like guest RAM. */
	err = ks_proc_vmm_check(pid, why, sizeof(why));
	if (err) {
		ks_err(errbuf, errbuf_sz, "pid %d: %s", (int)pid, why);
		goto err;
	}
	ro.sz = sizeof(ro);
	ro.errbuf = errbuf;
	ro.errbuf_sz = errbuf_sz;
	p->ram = kvmstats_ram__open(pid, &ro);
	if (!p->ram) {
		err = -errno;
		goto err;
	}
	p->res.pid = pid;
	kvmstats_proc__name(pid, p->res.name, sizeof(p->res.name));
	p->res.memory_bytes = kvmstats_ram__bytes(p->ram);
	p->res.pages = p->res.memory_bytes / KS_PAGE;
	p->res.method = KVMSTATS_METHOD_NR;
	p->ov = (struct kvmstats_migrate_overrides){
		.sz = sizeof(p->ov), .compress = -1, .auto_converge = -1, .postcopy = -1 };
	read_base(p, ro.timeout_ms);
	pick_link(p);
	return p;
err:
	free(p);
	errno = -err;
	return NULL;
}

void kvmstats_plan__free(struct kvmstats_plan *p)
{
	if (!p)
		return;
	kvmstats_dirty__free(p->dirty);
	kvmstats_pages__free(p->pg);
	kvmstats_ram__free(p->ram);
	free(p);
}

const struct kvmstats_ram *kvmstats_plan__ram(const struct kvmstats_plan *p)
{
	return p->ram;
}

const struct kvmstats_plan_vm *kvmstats_plan__result(const struct kvmstats_plan *p)
{
	return &p->res;
}

void kvmstats_plan__set_progress(struct kvmstats_plan *p, kvmstats_progress_fn fn,
				 void *arg)
{
	p->scan.progress = fn;
	p->scan.progress_arg = arg;
}

static void done(struct kvmstats_plan *p, enum kvmstats_method m)
{
	p->res.done |= 1u << m;
}

int kvmstats_plan__stats(struct kvmstats_plan *p, const struct kvmstats_vmm *vmm)
{
	int err = kvmstats_estimate__stats(vmm, p->res.pages,
					   &p->res.est[KVMSTATS_METHOD_STATS]);

	if (!err)
		done(p, KVMSTATS_METHOD_STATS);
	return err;
}

static bool wants(const struct kvmstats_plan *p, enum kvmstats_method m)
{
	return p->o.methods & (1u << m);
}

static int classify(struct kvmstats_plan *p)
{
	if (p->pg)
		return 0;
	p->pg = kvmstats_pages__classify(p->ram, &(struct kvmstats_pages_opts){
		.sz = sizeof(struct kvmstats_pages_opts), .mode = p->o.pagemap_mode,
		.timeout_ms = p->o.pagemap_timeout_ms });
	if (!p->pg)
		return fail(p, -errno, "%s", errno == ESRCH ? "the VM exited" :
			    strerror(errno));
	p->res.counts = *kvmstats_pages__counts(p->pg);
	return 0;
}

/* The most pages any pass found missing (the VMM took them away while
 * we read), the dirty-rate passes included. */
static void note_missing(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;

	for (int m = 0; m < KVMSTATS_METHOD_NR; m++)
		if ((r->done & (1u << m)) && r->est[m].missing_pages > r->missing_pages)
			r->missing_pages = r->est[m].missing_pages;
	if (r->dirty_measured && r->dirty.missing_pages > r->missing_pages)
		r->missing_pages = r->dirty.missing_pages;
}

static int estimate(struct kvmstats_plan *p)
{
	struct kvmstats_estimate *est = p->res.est;
	int err = 0;

	if (p->o.methods == 1u << KVMSTATS_METHOD_STATS &&
	    (p->o.flags & KVMSTATS_PLAN_ASSUME_CLEAN))
		return 0;
	err = classify(p);
	if (err)
		return err;
	if (wants(p, KVMSTATS_METHOD_PAGEMAP)) {
		kvmstats_pages__estimate(p->pg, &est[KVMSTATS_METHOD_PAGEMAP]);
		done(p, KVMSTATS_METHOD_PAGEMAP);
	}
	if (wants(p, KVMSTATS_METHOD_SAMPLE)) {
		err = kvmstats_pages__sample(p->pg, &(struct kvmstats_sample_opts){
			.sz = sizeof(struct kvmstats_sample_opts),
			.pages_per_gib = p->o.sample_pages_per_gib,
			.seed = p->o.seed, .zero = p->scan.zero },
			&est[KVMSTATS_METHOD_SAMPLE]);
		done(p, KVMSTATS_METHOD_SAMPLE);
		if (err)
			return fail(p, err, "sample: %s", err == -ESRCH ?
				    "the VM exited" : strerror(-err));
	}
	if (wants(p, KVMSTATS_METHOD_SCAN)) {
		err = kvmstats_pages__scan(p->pg, &p->scan, &est[KVMSTATS_METHOD_SCAN]);
		done(p, KVMSTATS_METHOD_SCAN);
		if (err)
			return fail(p, err, "scan: %s", err == -ESRCH ?
				    "the VM exited during the scan" : strerror(-err));
	}
	return 0;
}

int kvmstats_plan__estimate(struct kvmstats_plan *p)
{
	int err = estimate(p);

	note_missing(p);
	return err;
}

/* Why the dirty rate could not be measured. */
static const char *dirty_why(int err)
{
	if (err == -ESRCH)
		return "the VM exited";
	if (err == -ETIME)
		return "the VMM's page tables were not all classified within the "
		       "pagemap pass's time (its address space is too large)";
	return strerror(-err);
}

/* The VMM's CPU time now, as the dirty rate's start (@i 0) or its last
 * point (1); unreadable, the busy CPUs are not measured. */
static void read_cpu(struct kvmstats_plan *p, int i)
{
	if (ks_proc_cpu_ns(p->res.pid, &p->cpu_ns[i]))
		p->cpu_at[i] = 0;
	else
		p->cpu_at[i] = ks_now_ns();
}

/* The CPUs the VMM kept busy over the dirty rate's interval; NAN where
 * it was not measured. */
static double vmm_busy(const struct kvmstats_plan *p)
{
	if (!p->cpu_at[0] || p->cpu_at[1] <= p->cpu_at[0] ||
	    p->cpu_ns[1] < p->cpu_ns[0])
		return NAN;
	return (double)(p->cpu_ns[1] - p->cpu_ns[0]) /
	       (double)(p->cpu_at[1] - p->cpu_at[0]);
}

int kvmstats_plan__dirty_begin(struct kvmstats_plan *p)
{
	int err;

	if (p->o.flags & KVMSTATS_PLAN_ASSUME_CLEAN)
		return 0;
	err = classify(p);
	if (err)
		return err;
	p->dirty = kvmstats_dirty__new(p->pg, &(struct kvmstats_dirty_opts){
		.sz = sizeof(struct kvmstats_dirty_opts),
		.pages_per_gib = p->o.dirty_pages_per_gib, .seed = p->o.seed });
	if (!p->dirty)
		return fail(p, -errno, "dirty rate: %s", dirty_why(-errno));
	read_cpu(p, 0);
	return 0;
}

int kvmstats_plan__dirty_age(const struct kvmstats_plan *p, double *age_s)
{
	if (!p || !p->dirty)
		return -ENODATA;
	*age_s = ks_dirty_age(p->dirty);
	return 0;
}

/* The rate is the one over the interval asked for, as QEMU's
 * calc-dirty-rate gives it: the points sampling more added past it (an
 * uncertain verdict) only extend the curve the model reads. A working
 * set that saturates would otherwise show a rate falling with each. */
static void rate_at_interval(struct kvmstats_dirty_result *d, uint32_t extra)
{
	const struct kvmstats_dirty_point *pt;

	if (!extra || d->npoints <= extra)
		return;
	pt = &d->points[d->npoints - 1 - extra];
	if (pt->t <= 0)
		return;
	d->pages_per_second = pt->pages / pt->t;
	d->lo = pt->lo / pt->t;
	d->hi = pt->hi / pt->t;
}

int kvmstats_plan__dirty_point(struct kvmstats_plan *p)
{
	int err;

	if (!p->dirty)
		return 0;
	err = kvmstats_dirty__point(p->dirty);
	if (err)
		return fail(p, err, "dirty rate: %s", dirty_why(err));
	p->res.dirty_measured = !kvmstats_dirty__result(p->dirty, &p->res.dirty);
	rate_at_interval(&p->res.dirty, p->extra);
	read_cpu(p, 1);
	note_missing(p);
	return 0;
}

int kvmstats_plan__dirty_extend(struct kvmstats_plan *p)
{
	int err;

	if (!p->dirty)
		return 0;
	p->extra++;		/* before the point: the rate stays the interval's */
	err = kvmstats_plan__dirty_point(p);
	if (err)
		p->extra--;
	return err;
}

/* Which mechanism runs the migration; compress a sample when multifd
 * compresses (bounded: 4096 pages, half a second). */
static void mechanism(struct kvmstats_plan *p)
{
	struct kvmstats_migrate_detail *d = &p->detail;
	const struct kvmstats_migrate_settings *s = &p->mig;
	bool zc = s->multifd && (s->compress == KVMSTATS_MIG_COMPRESS_ZLIB ||
				 s->compress == KVMSTATS_MIG_COMPRESS_ZSTD);

	memset(&d->compress, 0, sizeof(d->compress));
	d->mechanism = !s->multifd ? "legacy" : !zc ? "multifd" :
		       s->compress == KVMSTATS_MIG_COMPRESS_ZLIB ? "multifd+zlib" :
								   "multifd+zstd";
	not_modelled(p);
	if (!zc)
		return;
	if (classify(p) || ks_compress_sample(p->pg, s->compress, s->level, p->o.seed,
					      4096, 0.5, &d->compress))
		snprintf(d->compress.note, sizeof(d->compress.note),
			 "no sample could be compressed: taken as incompressible");
}

/* The most precise valid estimate made. */
static int best_method(const struct kvmstats_plan_vm *r)
{
	static const enum kvmstats_method order[] = {
		KVMSTATS_METHOD_SCAN, KVMSTATS_METHOD_SAMPLE,
		KVMSTATS_METHOD_PAGEMAP, KVMSTATS_METHOD_STATS,
	};

	for (size_t i = 0; i < ARRAY_SIZE(order); i++)
		if ((r->done & (1u << order[i])) && r->est[order[i]].valid)
			return order[i];
	return -1;
}

/* The scan's own rate of reading and testing pages for zero, per CPU:
 * QEMU's walk runs at about it on the same host. Too little read to time
 * it (a guest almost all untouched): 0, not modelled. Nor in a build
 * with AddressSanitizer, whose checked loads test pages slower than
 * QEMU does (half QEMU's rate in the lab): that rate is not the host's. */
#define KS_WALK_MIN_BYTES (4ull << 20)

#if defined(__SANITIZE_ADDRESS__)
#define KS_WALK_INSTRUMENTED true
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KS_WALK_INSTRUMENTED true
#endif
#endif
#ifndef KS_WALK_INSTRUMENTED
#define KS_WALK_INSTRUMENTED false
#endif

static double walk_rate(const struct kvmstats_plan_vm *r)
{
	const struct kvmstats_estimate *e = &r->est[KVMSTATS_METHOD_SCAN];

	if (KS_WALK_INSTRUMENTED)
		return 0;
	if (!(r->done & (1u << KVMSTATS_METHOD_SCAN)) || !e->valid ||
	    e->test_cpu_s <= 0 || e->bytes_read < KS_WALK_MIN_BYTES)
		return 0;
	return (double)e->bytes_read / e->test_cpu_s;
}

/* The CPUs the VMM's migration threads may run on; 0 (the host's) where
 * its affinity cannot be read. */
static uint32_t vmm_cpus(pid_t pid)
{
	int n = ks_proc_cpus(pid);

	return n > 0 ? (uint32_t)n : 0;
}

/* The first pass's end, read once: as deep as twice the threshold at
 * the bandwidth (multifd's runs up to 1.7x over it), within
 * KVMSTATS_TAIL_POINTS' bound. Not read (a VMM that went away, no page
 * classification): the model takes the pass's mean. */
static void read_tail(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;
	double thr = 2 * r->bandwidth * r->downtime_s / KS_PAGE;
	uint64_t most = 1ull << (KVMSTATS_TAIL_POINTS - 1);

	if (p->tail_read || !p->pg)
		return;
	p->tail_read = true;
	if (ks_pages_tail(p->pg, thr < 1024 ? 1024 : thr > (double)most ? most
					   : (uint64_t)thr,
			  r->tail, &r->ntail))
		r->ntail = 0;
}

int kvmstats_plan__predict(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;
	const struct kvmstats_estimate *e;
	uint64_t names = 0;
	int m = best_method(r), err;
	double busy = vmm_busy(p);

	r->elapsed_s = ks_secs(ks_now_ns() - p->t0);
	if (r->error)
		return r->error;
	if (m < 0)
		return fail(p, -ENODATA, "no estimate could be made%s%s",
			    r->est[KVMSTATS_METHOD_STATS].note[0] ? ": " : "",
			    r->est[KVMSTATS_METHOD_STATS].note);
	r->method = (enum kvmstats_method)m;
	e = &r->est[m];
	for (size_t i = 0; i < kvmstats_ram__count(p->ram); i++)
		names += strlen(kvmstats_ram__region(p->ram, i)->name);
	mechanism(p);
	read_tail(p);
	err = ks_migrate_predict(&(struct kvmstats_migrate_input){
		.sz = sizeof(struct kvmstats_migrate_input),
		.zero_pages = e->zero_pages, .nonzero_pages = e->nonzero_pages,
		.unknown_pages = e->unknown_pages,
		.nblocks = (uint32_t)kvmstats_ram__count(p->ram),
		.block_name_bytes = names,
		.curve = r->dirty_measured ? r->dirty.points : NULL,
		.npoints = r->dirty_measured ? r->dirty.npoints : 0,
		.bandwidth = r->bandwidth, .downtime_s = r->downtime_s,
		.zero_lo = e->zero_lo, .zero_hi = e->zero_hi,
		.walk_rate = walk_rate(r), .cpus = vmm_cpus(r->pid),
		.link_bw = p->o.link_bw, .vmm_busy = isnan(busy) ? 0 : busy,
		.tail = r->tail, .ntail = r->ntail },
		&p->mig, &p->detail.compress, &r->pred, &p->detail);
	if (err)
		return fail(p, err, "model: %s", strerror(-err));
	p->detail.vmm_busy = busy;
	r->pred.dirty_samples = r->dirty_measured ? 1 + p->extra : 0;
	r->predicted = true;
	return 0;
}

/* Where the verdict depends on the sample, measure on (the same curve,
 * one more interval each time), at most KS_PLAN_EXTRA times. */
#define KS_PLAN_EXTRA 2

int kvmstats_plan__run(struct kvmstats_plan *p)
{
	double interval = p->o.interval_s > 0 ? p->o.interval_s : 1;
	uint32_t points = p->o.dirty_points ? p->o.dirty_points : 4;
	int err = 0;

	if (p->o.methods & (1u << KVMSTATS_METHOD_STATS) &&
	    !(p->res.done & (1u << KVMSTATS_METHOD_STATS)))
		kvmstats_plan__stats(p, NULL);
	err = kvmstats_plan__estimate(p);
	if (!err)
		err = kvmstats_plan__dirty_begin(p);
	for (uint32_t i = 0; !err && p->dirty && i < points; i++) {
		double at = interval / (double)(1u << (points - 1 - i));

		ks_sleep(at - ks_dirty_age(p->dirty));
		err = kvmstats_plan__dirty_point(p);
	}
	err = err ? err : kvmstats_plan__predict(p);
	for (uint32_t k = 0; !err && p->dirty && k < KS_PLAN_EXTRA &&
			     p->res.pred.verdict == KVMSTATS_VERDICT_UNCERTAIN; k++) {
		ks_sleep(interval * (k + 2) - ks_dirty_age(p->dirty));
		err = kvmstats_plan__dirty_extend(p);
		if (!err)
			err = kvmstats_plan__predict(p);
	}
	return err;
}

int kvmstats_plan_vm__compare(const struct kvmstats_plan_vm *a,
			      const struct kvmstats_plan_vm *b)
{
	bool ga = !a->error && a->predicted, gb = !b->error && b->predicted;

	if (ga != gb)
		return ga ? -1 : 1;
	if (ga && a->pred.verdict != b->pred.verdict)
		return a->pred.verdict < b->pred.verdict ? -1 : 1;
	if (ga && a->pred.seconds != b->pred.seconds)
		return a->pred.seconds < b->pred.seconds ? -1 : 1;
	return (a->pid > b->pid) - (a->pid < b->pid);
}
