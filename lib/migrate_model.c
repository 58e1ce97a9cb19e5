// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What a live migration of a VM would cost, and the plan that puts the
 * estimators, the dirty rate and the model together for one VM.
 *
 * The model is QEMU's pre-copy as QEMU 7.2 implements it
 * (migration/ram.c and migration/migration.c), read for facts only:
 *
 *  - ram_save_target_page() tries save_zero_page() first: a page that
 *    buffer_is_zero() finds zero is sent as save_page_header() (a be64 of
 *    offset | RAM_SAVE_FLAG_ZERO) plus one byte: 9 bytes, counted in
 *    ram_counters.duplicate;
 *  - any other page goes through save_normal_page(): the header and
 *    TARGET_PAGE_SIZE bytes, 8 + 4096, counted in ram_counters.normal;
 *  - the first page sent from a RAM block in a pass carries the block's
 *    idstr (one length byte and the name) after its header; later pages of
 *    the same block set RAM_SAVE_FLAG_CONTINUE instead;
 *  - every pass ends with RAM_SAVE_FLAG_EOS, a be64;
 *  - the first pass sends every page of every migratable block (its used
 *    length); each later pass sends the pages whose dirty bit was set
 *    during the previous one (KVM's dirty log, synced between passes);
 *  - migration_iteration_run() completes when the pending dirty memory
 *    (pages x TARGET_PAGE_SIZE) is at most bandwidth x downtime-limit: the
 *    VM is stopped and the rest sent; the transfer is rate-limited to
 *    max-bandwidth (128 MiB/s by default in 7.2), downtime-limit is 300
 *    ms by default;
 *  - without auto-converge (off by default) a guest that dirties memory
 *    as fast as it is sent never completes.
 *
 * So: pass 0 sends zero x 9 + (nonzero + unknown) x 4104 bytes (unknown
 * pages, swapped out, are counted as normal: the worst case) in
 * t0 = bytes / bandwidth; pass k+1 sends the pages dirtied within t_k,
 * read off the measured dirty curve, as normal pages; stop when that is
 * under the downtime threshold, or declare non-convergence when a pass
 * stops shrinking. Dirtied pages are assumed non-zero.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mem_internal.h"

/* Setup and switch-over of an idle guest, beyond its bytes at the
 * bandwidth: measured 70-90 ms on QEMU 7.2 and 10.0 (256 MiB guests). */
#define KS_MIG_SETUP_S 0.07

/* ---- the model ---- */

double kvmstats_dirty_curve_at(const struct kvmstats_dirty_point *c, uint32_t n,
			       double t, double cap)
{
	double t0 = 0, p0 = 0, v;

	if (!c || !n || t <= 0)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		if (t <= c[i].t) {
			v = c[i].t > t0 ? p0 + (c[i].pages - p0) * (t - t0) / (c[i].t - t0)
					: c[i].pages;
			return v < cap ? v : cap;
		}
		if (i + 1 < n) {
			t0 = c[i].t;
			p0 = c[i].pages;
		}
	}
	/* Past the curve: its last slope (a concave curve's smallest). */
	if (n > 1) {
		t0 = c[n - 2].t;
		p0 = c[n - 2].pages;
	} else {
		t0 = 0;
		p0 = 0;
	}
	v = c[n - 1].pages;
	if (c[n - 1].t > t0)
		v += (c[n - 1].pages - p0) / (c[n - 1].t - t0) * (t - c[n - 1].t);
	if (v < c[n - 1].pages)
		v = c[n - 1].pages;
	return v < cap ? v : cap;
}

/* Bytes of one pass that sends @zero zero pages and @normal other pages
 * from @blocks blocks. */
static double pass_bytes(const struct kvmstats_migrate_input *in, double zero,
			 double normal, double blocks)
{
	double names = in->nblocks ? blocks / in->nblocks * in->block_name_bytes : 0;

	return zero * KVMSTATS_QEMU_ZERO_PAGE_BYTES +
	       normal * KVMSTATS_QEMU_NORMAL_PAGE_BYTES + blocks + names +
	       KVMSTATS_QEMU_EOS_BYTES;
}

/*
 * Auto-converge, as QEMU's migration_trigger_throttle() and
 * mig_throttle_guest_down() do it (7.2 to 10.0, read for facts only): at
 * a dirty-bitmap sync at least a second after the previous period began,
 * if the bytes dirtied in the period exceed throttle-trigger-threshold
 * (50%) of the bytes sent in it for the second time, the throttle starts
 * at cpu-throttle-initial or grows by cpu-throttle-increment, up to 99%.
 * A throttled vCPU runs (100 - throttle)% of the time, so the guest's own
 * time, on which its dirty curve is measured, advances that much slower.
 */
struct throttle {
	bool on;
	unsigned int pct, high;	/* current throttle, periods over threshold */
	double period_t, period_sent, period_dirty;
	double throttled_s;
	unsigned int max;
};

static void throttle_sync(struct throttle *th, const struct kvmstats_migrate_settings *s,
			  double now, double sent, double dirtied_pages)
{
	th->period_sent += sent;
	th->period_dirty += dirtied_pages * KS_PAGE;
	if (!th->on || now - th->period_t < 1.0)
		return;
	if (th->period_dirty > th->period_sent * 0.5 && ++th->high >= 2) {
		th->high = 0;
		th->pct = th->pct ? th->pct + s->throttle_increment : s->throttle_initial;
		if (th->pct > 99)
			th->pct = 99;
		if (th->pct > th->max)
			th->max = th->pct;
	}
	th->period_t = now;
	th->period_sent = th->period_dirty = 0;
}

/* How one pass is sent, by the mechanism the settings pick. */
struct mech {
	const struct kvmstats_migrate_input *in;
	const struct kvmstats_migrate_settings *s;	/* NULL: 7.2's legacy */
	const struct kvmstats_compress_estimate *c;
	double wire;		/* running total over the wire */
};

static double pass_cost(struct mech *m, double zero, double normal, double blocks)
{
	struct ks_mig_pages pg = { zero, normal, blocks };
	double reported, wire;

	if (!m->s || !m->s->multifd) {
		reported = pass_bytes(m->in, zero, normal, blocks);
		if (m->s && m->s->zero_detect == KVMSTATS_MIG_ZERO_NONE &&
		    m->s->qemu_major >= 9)
			reported = pass_bytes(m->in, 0, zero + normal, blocks);
		m->wire += reported;
		return reported;
	}
	ks_multifd_pass(m->s, m->c, &pg, &reported, &wire);
	m->wire += wire;
	return reported;
}

/* Seconds the channels need to compress @normal pages, at the speed our
 * own sample ran (same library and level), on as many CPUs as channels. */
static double compress_seconds(const struct mech *m, double normal)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double par;

	if (!m->s || !m->s->multifd || !m->c || !m->c->valid || !m->c->pages)
		return 0;
	par = m->s->channels < (unsigned long)(cpus > 0 ? cpus : 1) ?
		      m->s->channels : (double)(cpus > 0 ? cpus : 1);
	return m->c->elapsed_s / (double)m->c->pages * normal / par;
}

static int run_model(const struct kvmstats_migrate_input *input,
		     const struct kvmstats_migrate_settings *s,
		     const struct kvmstats_compress_estimate *c,
		     struct kvmstats_migrate_prediction *out,
		     struct kvmstats_migrate_detail *d)
{
	struct kvmstats_migrate_input in;
	struct mech m = { &in, s, c, 0 };
	struct throttle th = { .on = s && s->auto_converge };
	double bw, thr, cap, bytes, t, total_b, total_t, pending, rate, lim;
	uint32_t maxp;
	int err = ks_opts_copy(&in, sizeof(in), input);

	if (err || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	bw = in.bandwidth > 0 ? in.bandwidth : (double)KVMSTATS_QEMU_MAX_BANDWIDTH;
	thr = bw * (in.downtime_s > 0 ? in.downtime_s : KVMSTATS_QEMU_DOWNTIME_MS / 1e3);
	/* The rate the transfer runs at: multifd's can exceed the limit. */
	rate = s && s->multifd ? ks_multifd_bandwidth(s) * bw / s->bandwidth : bw;
	maxp = in.max_passes ? in.max_passes : th.on ? 300 : 30;
	cap = (double)(in.zero_pages + in.nonzero_pages + in.unknown_pages);
	out->assumed_clean = !in.curve || !in.npoints;
	if (!out->assumed_clean && in.curve[in.npoints - 1].t > 0)
		out->dirty_pages_per_second = in.curve[in.npoints - 1].pages /
					      in.curve[in.npoints - 1].t;

	bytes = pass_cost(&m, (double)in.zero_pages,
			  (double)(in.nonzero_pages + in.unknown_pages), in.nblocks);
	t = bytes / rate;
	lim = compress_seconds(&m, (double)(in.nonzero_pages + in.unknown_pages));
	if (lim > t)
		t = lim;
	out->first_pass_bytes = (uint64_t)bytes;
	total_b = bytes + (s ? ks_migrate_fixed_bytes(s) : 0);
	total_t = t + (s ? KS_MIG_SETUP_S : 0);
	out->passes = 1;
	for (;;) {
		double next_b, next_t;

		/* The guest's own time runs slower under the throttle. */
		if (th.pct)
			th.throttled_s += t;
		pending = out->assumed_clean ? 0 : kvmstats_dirty_curve_at(
					in.curve, in.npoints, t * (1 - th.pct / 100.0), cap);
		throttle_sync(&th, s, total_t, bytes, pending);
		next_b = pass_cost(&m, 0, pending, pending > 0 ? in.nblocks : 0);
		next_t = next_b / rate;
		if (compress_seconds(&m, pending) > next_t)
			next_t = compress_seconds(&m, pending);
		if (pending * KS_PAGE <= thr) {
			/* Stop and copy: the rest, with the VM paused. */
			out->final_bytes = (uint64_t)next_b;
			out->downtime_s = next_t;
			total_b += next_b;
			total_t += next_t;
			out->passes++;
			out->converges = true;
			break;
		}
		/* While auto-converge can still throttle harder, go on. */
		if ((next_b >= bytes * 0.95 && (!th.on || th.pct >= 99)) ||
		    out->passes >= maxp) {
			snprintf(out->note, sizeof(out->note), "does not converge: "
				 "pass %u would still send %.0f MiB (%.0f pages "
				 "dirtied in %.2f s) > %.0f MiB allowed in the "
				 "downtime", out->passes + 1, next_b / 1048576.0,
				 pending, t, thr / 1048576.0);
			break;
		}
		total_b += next_b;
		total_t += next_t;
		bytes = next_b;
		t = next_t;
		out->passes++;
	}
	out->bytes = (uint64_t)total_b;
	out->seconds = total_t;
	if (d) {
		d->max_throttle = th.max;
		d->throttled_s = th.throttled_s;
		d->effective_bw = rate;
		d->wire_bytes = (uint64_t)(m.wire + (s ? ks_migrate_fixed_bytes(s) : 0));
	}
	if (out->converges)
		snprintf(out->note, sizeof(out->note), "%u passes, %.0f ms downtime%s",
			 out->passes, out->downtime_s * 1e3,
			 out->assumed_clean ? "; assumed a clean guest (no dirty rate)" : "");
	return 0;
}

int kvmstats_migrate__predict(const struct kvmstats_migrate_input *input,
			      struct kvmstats_migrate_prediction *out)
{
	return run_model(input, NULL, NULL, out, NULL);
}

/* ---- estimator names ---- */

static const char *const method_names[] = {
	[KVMSTATS_METHOD_STATS] = "stats",
	[KVMSTATS_METHOD_PAGEMAP] = "pagemap",
	[KVMSTATS_METHOD_SAMPLE] = "sample",
	[KVMSTATS_METHOD_SCAN] = "scan",
};

const char *kvmstats_method_str(enum kvmstats_method m)
{
	return m < KVMSTATS_METHOD_NR ? method_names[m] : "unknown";
}

int kvmstats_method_parse(const char *s)
{
	for (int i = 0; s && i < KVMSTATS_METHOD_NR; i++)
		if (!strcmp(s, method_names[i]))
			return i;
	return -EINVAL;
}

/* ---- the stats estimator ---- */

/* Sum of @name over a reader's current values; false when absent. */
static bool read_stat(struct kvmstats_reader *r, const char *const *names,
		      const uint64_t *mult, size_t n, uint64_t *sum)
{
	const struct kvmstats_schema *s = kvmstats_reader__schema(r);
	struct kvmstats_sample *smp = kvmstats_sample__new(s);
	bool found = false;

	if (!smp)
		return false;
	if (!kvmstats_reader__read(r, smp)) {
		const uint64_t *miss = kvmstats_reader__missing(r);

		for (size_t i = 0; i < n; i++) {
			const struct kvmstats_stat *st = kvmstats_schema__find(s, names[i]);
			uint32_t k;

			if (!st)
				continue;
			k = kvmstats_stat__index(st);
			if (miss && (miss[k / 64] >> (k % 64) & 1))
				continue;
			*sum += kvmstats_stat__values(st, smp->data)[0] * mult[i];
			found = true;
		}
	}
	kvmstats_sample__free(smp);
	return found;
}

int kvmstats_estimate__stats(const struct kvmstats_vmm *vmm, uint64_t ram_pages,
			     struct kvmstats_estimate *e)
{
	static const char *const pages[] = { "pages_4k", "pages_2m", "pages_1g" };
	static const uint64_t mult[] = { 1, 512, 262144 };
	static const char *const exits[] = { "exits" };
	static const uint64_t one[] = { 1 };
	uint64_t t0 = ks_now_ns(), mapped = 0, nexits = 0;
	bool have_pages = false, have_exits = false;

	if (!e)
		return -EINVAL;
	memset(e, 0, sizeof(*e));
	e->method = KVMSTATS_METHOD_STATS;
	e->pages = ram_pages;
	for (size_t i = 0; vmm && i < kvmstats_vmm__num_vms(vmm); i++) {
		struct kvmstats_vm *vm = kvmstats_vmm__vm(vmm, i);
		int index;

		if (kvmstats_vm__reader(vm))
			have_pages |= read_stat(kvmstats_vm__reader(vm), pages, mult, 3,
						&mapped);
		for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
			have_exits |= read_stat(kvmstats_vm__vcpu(vm, k, &index), exits,
						one, 1, &nexits);
	}
	e->elapsed_s = e->cpu_s = ks_secs(ks_now_ns() - t0);
	if (!have_pages) {
		snprintf(e->note, sizeof(e->note), "no source gives this VM's "
			 "pages_4k/2m/1g");
		return 0;
	}
	if (!mapped && (nexits || !have_exits)) {
		snprintf(e->note, sizeof(e->note), "not maintained by this KVM: "
			 "pages_4k/2m/1g are 0 for a VM that has run (exits %s%" PRIu64 ")",
			 have_exits ? "" : "unknown, ", nexits);
		return 0;
	}
	e->valid = true;
	e->nonzero_pages = mapped < ram_pages ? mapped : ram_pages;
	e->zero_pages = ram_pages - e->nonzero_pages;
	e->zero_lo = (double)e->zero_pages;
	e->zero_hi = (double)ram_pages;
	snprintf(e->note, sizeof(e->note), "%" PRIu64 " pages mapped by KVM: counts "
		 "mappings, not unique pages; an upper bound on touched memory",
		 mapped);
	return 0;
}

/* ---- the plan ---- */

struct kvmstats_plan {
	struct kvmstats_plan_opts o;
	struct kvmstats_scan_opts scan;
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg;
	struct kvmstats_dirty *dirty;
	struct kvmstats_plan_vm res;
	struct kvmstats_migrate_settings mig;
	struct kvmstats_migrate_overrides ov;
	struct kvmstats_migrate_detail detail;
	uint64_t t0;
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

/* The settings: QEMU's (over QMP), else its defaults; the options over
 * both. */
static void pick_link(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;
	struct kvmstats_migrate_overrides ov = p->ov;

	if (kvmstats_ram__max_bandwidth(p->ram) || p->ram->mig_read) {
		p->mig = p->ram->mig;
	} else {
		memset(&p->mig, 0, sizeof(p->mig));
		ks_migrate_defaults(&p->mig);
	}
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
		s->postcopy ? "postcopy-ram (the switch to post-copy)" : NULL,
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
		.sz = sizeof(struct kvmstats_pages_opts), .mode = p->o.pagemap_mode });
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
		return fail(p, -errno, "dirty rate: %s", errno == ESRCH ?
			    "the VM exited" : strerror(errno));
	return 0;
}

int kvmstats_plan__dirty_point(struct kvmstats_plan *p)
{
	int err;

	if (!p->dirty)
		return 0;
	err = kvmstats_dirty__point(p->dirty);
	if (err)
		return fail(p, err, "dirty rate: %s", err == -ESRCH ?
			    "the VM exited" : strerror(-err));
	p->res.dirty_measured = !kvmstats_dirty__result(p->dirty, &p->res.dirty);
	note_missing(p);
	return 0;
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

int kvmstats_plan__predict(struct kvmstats_plan *p)
{
	struct kvmstats_plan_vm *r = &p->res;
	const struct kvmstats_estimate *e;
	uint64_t names = 0;
	int m = best_method(r), err;

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
	err = run_model(&(struct kvmstats_migrate_input){
		.sz = sizeof(struct kvmstats_migrate_input),
		.zero_pages = e->zero_pages, .nonzero_pages = e->nonzero_pages,
		.unknown_pages = e->unknown_pages,
		.nblocks = (uint32_t)kvmstats_ram__count(p->ram),
		.block_name_bytes = names,
		.curve = r->dirty_measured ? r->dirty.points : NULL,
		.npoints = r->dirty_measured ? r->dirty.npoints : 0,
		.bandwidth = r->bandwidth, .downtime_s = r->downtime_s }, &p->mig,
		&p->detail.compress, &r->pred, &p->detail);
	if (err)
		return fail(p, err, "model: %s", strerror(-err));
	r->predicted = true;
	return 0;
}

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
	return err ? err : kvmstats_plan__predict(p);
}

int kvmstats_plan_vm__compare(const struct kvmstats_plan_vm *a,
			      const struct kvmstats_plan_vm *b)
{
	bool ga = !a->error && a->predicted, gb = !b->error && b->predicted;

	if (ga != gb)
		return ga ? -1 : 1;
	if (ga && a->pred.converges != b->pred.converges)
		return a->pred.converges ? -1 : 1;
	if (ga && a->pred.seconds != b->pred.seconds)
		return a->pred.seconds < b->pred.seconds ? -1 : 1;
	return (a->pid > b->pid) - (a->pid < b->pid);
}

/* ---- Prometheus gauges for the exporter ---- */

struct out {
	char *buf;
	size_t len, used;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(o->used < o->len ? o->buf + o->used : NULL,
		      o->used < o->len ? o->len - o->used : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->used += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped. */
static void escape(char *dst, size_t len, const char *s)
{
	size_t k = 0;

	for (; *s && k + 3 < len; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n') {
			dst[k++] = '\\';
			dst[k++] = *s == '\n' ? 'n' : *s;
		} else {
			dst[k++] = *s;
		}
	}
	dst[k] = 0;
}

static double gauge(const struct kvmstats_plan_vm *v, int which, size_t rank)
{
	const struct kvmstats_estimate *e = &v->est[v->method];

	switch (which) {
	case 0: return (double)v->memory_bytes;
	case 1: return (double)e->zero_pages;
	case 2: return (double)e->nonzero_pages;
	case 3: return (double)e->unknown_pages;
	case 4: return e->pages ? (double)e->zero_pages / (double)e->pages : 0;
	case 5: return v->dirty_measured ? v->dirty.pages_per_second : 0;
	case 6: return (double)v->pred.bytes;
	case 7: return v->pred.seconds;
	case 8: return v->pred.converges;
	case 9: return v->elapsed_s;
	default: return (double)rank;
	}
}

int kvmstats_plan__prometheus(const struct kvmstats_plan_vm *const *vms, size_t n,
			      char *buf, size_t len)
{
	static const char *const metric[][2] = {
		{ "memory_bytes", "Guest RAM found in the VMM, bytes" },
		{ "zero_pages", "Guest pages that are zero (4 KiB)" },
		{ "nonzero_pages", "Guest pages that are not zero (4 KiB)" },
		{ "unknown_pages", "Guest pages of unknown content (swapped)" },
		{ "zero_ratio", "Share of guest pages that are zero" },
		{ "dirty_pages_per_second", "Guest pages dirtied per second" },
		{ "predicted_transfer_bytes", "Predicted bytes sent by a QEMU live migration" },
		{ "predicted_seconds", "Predicted duration of a QEMU live migration" },
		{ "converges", "1 when pre-copy is predicted to converge" },
		{ "elapsed_seconds", "Wall time the plan took" },
		{ "rank", "Position by predicted migration cost, 1 = cheapest" },
	};
	struct out o = { buf, len, 0 };
	char name[260];

	if ((n && !vms) || (len && !buf))
		return -EINVAL;
	for (size_t m = 0; m < ARRAY_SIZE(metric); m++) {
		size_t rank = 0;

		put(&o, "# HELP kvmstats_plan_%s %s\n# TYPE kvmstats_plan_%s gauge\n",
		    metric[m][0], metric[m][1], metric[m][0]);
		for (size_t i = 0; i < n; i++) {
			const struct kvmstats_plan_vm *v = vms[i];

			if (!v || v->error || !v->predicted)
				continue;
			rank = 1;
			for (size_t j = 0; j < n; j++)
				rank += vms[j] && j != i &&
					kvmstats_plan_vm__compare(vms[j], v) < 0;
			escape(name, sizeof(name), v->name);
			put(&o, "kvmstats_plan_%s{pid=\"%d\",name=\"%s\",method=\"%s\"} %.17g\n",
			    metric[m][0], (int)v->pid, name, kvmstats_method_str(v->method),
			    gauge(v, (int)m, rank));
		}
	}
	if (len)
		buf[o.used < len ? o.used : len - 1] = 0;
	return o.used > INT32_MAX ? -EOVERFLOW : (int)o.used;
}
