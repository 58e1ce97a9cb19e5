// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * KVM stats as Prometheus metrics: the model. Which stat of which schema
 * makes which family, the targets (a VM's or a vCPU's reader) and their
 * label text, kept in line with the host and fed each scrape's readings;
 * prom_text.c turns it into text.
 *
 * Naming (Prometheus conventions, base units):
 *   kvm_vm_<stat>, kvm_vcpu_<stat>; labels pid, name, vm (the VM's index
 *   in its VMM: one process may hold many VMs) and vcpu.
 *   cumulative      -> counter  <name>_total
 *   instant, peak   -> gauge
 *   boolean unit    -> gauge 0/1
 *   log/linear hist -> histogram <name>_bucket{le=...}, _count, and _sum
 *                      only where the true sum is another stat
 *   A unit suffix of the kernel's name (_ns, _us, _ms, _bytes, _cycles) is
 *   replaced by the base unit's (_seconds, _bytes, _cycles), and values are
 *   scaled from the descriptor's base and exponent. Cycles have no larger
 *   or smaller unit in Prometheus, so they stay cycles.
 *
 * Speed: the model is built once per change of the host (families,
 * series, label strings), and a rendering is memcpy of prebuilt strings
 * plus integer formatting into a reused buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom_int.h"

static const char *const src_names[PROM_NSRC - 1] = {
	"fd", "attach", "qmp", "libvirt", "debugfs",
};

unsigned int prom_source_index(const char *source)
{
	for (unsigned int i = 0; i < PROM_NSRC - 1; i++)
		if (source && !strcmp(src_names[i], source))
			return i;
	return PROM_NSRC - 1;
}

const char *prom_source_name(unsigned int src)
{
	return src < PROM_NSRC - 1 ? src_names[src] : "other";
}

/* Histograms whose sum the kernel keeps in another stat, updated with the
 * same observations (virt/kvm/kvm_main.c: update_halt_poll_stats() and
 * kvm_vcpu_halt()). Any other histogram has no _sum: none is made up. */
static const struct {
	const char *hist, *sum;
} hist_sums[] = {
	{ "halt_poll_success_hist", "halt_poll_success_ns" },
	{ "halt_poll_fail_hist", "halt_poll_fail_ns" },
	{ "halt_wait_hist", "halt_wait_ns" },
};

/* What the common stats mean, for HELP. */
static const struct {
	const char *name, *help;
} helps[] = {
	{ "exits", "VM exits" },
	{ "halt_exits", "exits on a guest HLT" },
	{ "io_exits", "exits on port I/O" },
	{ "mmio_exits", "exits on MMIO to user space" },
	{ "signal_exits", "exits to deliver a signal to the VMM" },
	{ "irq_exits", "exits on an external interrupt" },
	{ "irq_window_exits", "exits to open an interrupt window" },
	{ "nmi_window_exits", "exits to open an NMI window" },
	{ "request_irq_exits", "exits to let user space inject an interrupt" },
	{ "notify_window_exits", "exits on a notify VM exit" },
	{ "halt_successful_poll", "halts ended by polling" },
	{ "halt_attempted_poll", "halts that polled" },
	{ "halt_poll_invalid", "halt polls woken for an invalid reason" },
	{ "halt_wakeup", "wake-ups from halt" },
	{ "halt_poll_success_ns", "time spent in halt polls that succeeded" },
	{ "halt_poll_fail_ns", "time spent in halt polls that failed" },
	{ "halt_wait_ns", "time spent waiting in halt" },
	{ "halt_poll_success_hist", "durations of halt polls that succeeded" },
	{ "halt_poll_fail_hist", "durations of halt polls that failed" },
	{ "halt_wait_hist", "durations of waits in halt" },
	{ "blocking", "1 while the vCPU is blocked (halted)" },
	{ "guest_mode", "1 while the vCPU runs a nested guest" },
	{ "pf_taken", "page faults taken" },
	{ "pf_fixed", "page faults fixed by the MMU" },
	{ "pf_emulate", "page faults that needed emulation" },
	{ "pf_spurious", "spurious page faults" },
	{ "pf_fast", "page faults fixed on the fast path" },
	{ "pf_guest", "page faults injected into the guest" },
	{ "tlb_flush", "TLB flushes" },
	{ "invlpg", "INVLPG instructions handled" },
	{ "fpu_reload", "FPU state reloads" },
	{ "insn_emulation", "instructions emulated" },
	{ "insn_emulation_fail", "instructions that could not be emulated" },
	{ "hypercalls", "hypercalls" },
	{ "irq_injections", "interrupts injected" },
	{ "nmi_injections", "NMIs injected" },
	{ "host_state_reload", "host state reloads" },
	{ "l1d_flush", "L1 data cache flushes" },
	{ "req_event", "event requests processed" },
	{ "nested_run", "nested guest entries" },
	{ "remote_tlb_flush", "remote TLB flushes" },
	{ "remote_tlb_flush_requests", "remote TLB flush requests" },
	{ "mmu_shadow_zapped", "shadow pages zapped" },
	{ "mmu_pte_write", "guest page table writes tracked" },
	{ "mmu_pde_zapped", "page directory entries zapped" },
	{ "mmu_flooded", "shadow pages flooded by writes" },
	{ "mmu_recycled", "shadow pages recycled" },
	{ "mmu_cache_miss", "shadow page cache misses" },
	{ "mmu_unsync", "unsynced shadow pages" },
	{ "pages_4k", "guest memory mapped with 4 KiB pages, in pages" },
	{ "pages_2m", "guest memory mapped with 2 MiB pages, in pages" },
	{ "pages_1g", "guest memory mapped with 1 GiB pages, in pages" },
	{ "nx_lpage_splits", "huge pages split for the NX workaround" },
	{ "max_mmu_rmap_size", "largest reverse map seen" },
	{ "max_mmu_page_hash_collisions", "most shadow page hash collisions seen" },
	/* arm64 (arch/arm64/kvm/guest.c) */
	{ "hvc_exit_stat", "exits on a guest HVC (hypercall)" },
	{ "wfe_exit_stat", "exits on a guest WFE (wait for event)" },
	{ "wfi_exit_stat", "exits on a guest WFI (wait for interrupt)" },
	{ "mmio_exit_user", "MMIO exits handled in user space" },
	{ "mmio_exit_kernel", "MMIO exits handled in the kernel" },
};

static const char *stat_help(const char *name)
{
	for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
		if (!strcmp(helps[i].name, name))
			return helps[i].help;
	return NULL;
}

static bool ends_with(const char *s, const char *sfx)
{
	size_t n = strlen(s), m = strlen(sfx);

	return n > m && !strcmp(s + n - m, sfx);
}

/* Family name for a stat: prefix, the kernel's name with its unit suffix
 * replaced by the base unit's. Returns false for a stat left out. */
static bool family_name(const struct kvmstats_stat *st, bool vcpu, char *out,
			size_t len, const char **unit)
{
	static const char *const drop[] = { "_ns", "_us", "_ms", "_seconds",
					    "_bytes", "_cycles" };
	char name[128];
	size_t n;

	snprintf(name, sizeof(name), "%s", kvmstats_stat__name(st));
	for (char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			*p = '_';
	switch (kvmstats_stat__unit(st)) {
	case KVMSTATS_UNIT_SECONDS:
		*unit = "seconds";
		break;
	case KVMSTATS_UNIT_BYTES:
		*unit = "bytes";
		break;
	case KVMSTATS_UNIT_CYCLES:
		*unit = "cycles";
		break;
	default:
		*unit = NULL;
	}
	if (*unit) {
		for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
			if (ends_with(name, drop[i])) {
				name[strlen(name) - strlen(drop[i])] = 0;
				break;
			}
		}
	}
	n = (size_t)snprintf(out, len, "kvm_%s_%s%s%s", vcpu ? "vcpu" : "vm", name,
			     *unit ? "_" : "", *unit ? *unit : "");
	/* A kernel name ending in _total would read as a counter's suffix. */
	if (kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE && n > 6 &&
	    ends_with(out, "_total"))
		out[n - 6] = 0;
	return n < len;
}

static struct scale stat_scale(const struct kvmstats_stat *st)
{
	struct scale sc = { SCALE_NONE, 0 };

	if (!kvmstats_stat__exponent(st))
		return sc;
	sc.mode = kvmstats_stat__base(st) == KVMSTATS_BASE_POW2 ? SCALE_POW2
								: SCALE_POW10;
	sc.exp = (int16_t)kvmstats_stat__exponent(st);
	return sc;
}

static char *xstrdup(const char *s, size_t *len)
{
	char *p = strdup(s);

	if (p && len)
		*len = strlen(p);
	return p;
}

/* HELP of a family: what the stat means, where, its type and unit. */
static void family_help(const struct family *f, const char *kname,
			const char *unit, const struct kvmstats_stat *st,
			char *help, size_t len)
{
	const char *what = stat_help(kname);

	snprintf(help, len, "%s%sKVM %s stat %s (%s%s%s)",
		 what ? what : "", what ? ". " : "", f->vcpu ? "vCPU" : "VM", kname,
		 kvmstats_type_str(kvmstats_stat__type(st)),
		 kvmstats_stat__exponent(st) || unit ? ", in " : "",
		 unit ? unit : kvmstats_stat__exponent(st) ? "base units" : "");
	if (f->kind == FAM_HIST && !f->has_sum)
		snprintf(help + strlen(help), len - strlen(help),
			 "; its sum is not known");
}

static void family_free(struct family *f)
{
	free(f->base);
	free(f->hdr[0]);
	free(f->hdr[1]);
	free(f->sample);
	free(f->count_name);
	free(f->sum_name);
	for (int fmt = 0; fmt < 2; fmt++) {
		for (uint32_t i = 0; f->le[fmt] && i < f->size; i++)
			free(f->le[fmt][i]);
		free(f->le[fmt]);
		free(f->le_len[fmt]);
	}
	free(f->series);
}

static bool is_hist(unsigned int type)
{
	return type == KVMSTATS_TYPE_LOG_HIST || type == KVMSTATS_TYPE_LINEAR_HIST;
}

/* The sum stat of histogram @st in @s, when it is a true sum. */
static const struct kvmstats_stat *hist_sum(const struct kvmstats_schema *s,
					    const struct kvmstats_stat *st)
{
	const struct kvmstats_stat *sum = NULL;

	for (size_t i = 0; i < sizeof(hist_sums) / sizeof(hist_sums[0]); i++)
		if (!strcmp(hist_sums[i].hist, kvmstats_stat__name(st)))
			sum = kvmstats_schema__find(s, hist_sums[i].sum);
	if (!sum || kvmstats_stat__type(sum) != KVMSTATS_TYPE_CUMULATIVE ||
	    kvmstats_stat__size(sum) != 1 ||
	    kvmstats_stat__unit(sum) != kvmstats_stat__unit(st) ||
	    kvmstats_stat__base(sum) != kvmstats_stat__base(st) ||
	    kvmstats_stat__exponent(sum) != kvmstats_stat__exponent(st))
		return NULL;
	return sum;
}

static enum fam_kind stat_kind(const struct kvmstats_stat *st)
{
	if (is_hist(kvmstats_stat__type(st)))
		return FAM_HIST;
	if (kvmstats_stat__unit(st) == KVMSTATS_UNIT_BOOLEAN)
		return FAM_BOOL;
	if (kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE)
		return FAM_COUNTER;
	return FAM_GAUGE;
}

static int family_init(struct family *f, const char *base, bool vcpu,
		       const struct kvmstats_schema *s,
		       const struct kvmstats_stat *st, const char *unit)
{
	const struct kvmstats_stat *sum = NULL;
	char name[200], help[384];

	f->base = xstrdup(base, NULL);
	f->kind = stat_kind(st);
	f->vcpu = vcpu;
	f->flags = kvmstats_stat__flags(st);
	f->exp = (int16_t)kvmstats_stat__exponent(st);
	f->size = (uint16_t)kvmstats_stat__size(st);
	f->bucket_size = kvmstats_stat__bucket_size(st);
	f->scale = stat_scale(st);
	if (f->kind == FAM_HIST) {
		sum = hist_sum(s, st);
		f->has_sum = sum != NULL;
		f->sum_scale = f->scale;
	}
	snprintf(name, sizeof(name), "%s%s{", base,
		 f->kind == FAM_COUNTER ? "_total" : f->kind == FAM_HIST ? "_bucket" : "");
	f->sample = xstrdup(name, &f->sample_len);
	snprintf(name, sizeof(name), "%s_count{", base);
	f->count_name = xstrdup(name, &f->count_len);
	snprintf(name, sizeof(name), "%s_sum{", base);
	f->sum_name = xstrdup(name, &f->sum_len);
	if (!f->base || !f->sample || !f->count_name || !f->sum_name)
		return -ENOMEM;
	family_help(f, kvmstats_stat__name(st), unit, st, help, sizeof(help));
	return prom_family_text(f, help, unit, st);
}

/* Can @st share family @f (same name)? Only with the same meaning. */
static bool family_fits(const struct family *f, const struct kvmstats_schema *s,
			const struct kvmstats_stat *st)
{
	return f->flags == kvmstats_stat__flags(st) &&
	       f->exp == kvmstats_stat__exponent(st) &&
	       f->size == kvmstats_stat__size(st) &&
	       f->bucket_size == kvmstats_stat__bucket_size(st) &&
	       (f->kind != FAM_HIST || f->has_sum == (hist_sum(s, st) != NULL));
}

static int find_family(struct prom_model *m, const char *base)
{
	for (size_t i = 0; i < m->nfams; i++)
		if (!strcmp(m->fams[i].base, base))
			return (int)i;
	return -1;
}

static int add_family(struct prom_model *m, const char *base, bool vcpu,
		      const struct kvmstats_schema *s,
		      const struct kvmstats_stat *st, const char *unit)
{
	struct family *p = realloc(m->fams, (m->nfams + 1) * sizeof(*p));

	if (!p)
		return -ENOMEM;
	m->fams = p;
	memset(&p[m->nfams], 0, sizeof(*p));
	if (family_init(&p[m->nfams], base, vcpu, s, st, unit)) {
		family_free(&p[m->nfams]);
		return -ENOMEM;
	}
	return (int)m->nfams++;
}

/* Which family each stat of @s goes to (built once per schema). */
static struct schema_map *get_map(struct prom_model *m,
				  const struct kvmstats_schema *s, bool vcpu)
{
	uint32_t n = kvmstats_schema__num_stats(s);
	struct schema_map *map;
	void *p;

	for (size_t i = 0; i < m->nmaps; i++)
		if (m->maps[i].s == s && m->maps[i].vcpu == vcpu)
			return &m->maps[i];
	p = realloc(m->maps, (m->nmaps + 1) * sizeof(*m->maps));
	if (!p)
		return NULL;
	m->maps = p;
	map = &m->maps[m->nmaps];
	map->s = s;
	map->vcpu = vcpu;
	map->n = n;
	map->fam = calloc(n ? n : 1, sizeof(*map->fam));
	map->sum_off = calloc(n ? n : 1, sizeof(*map->sum_off));
	if (!map->fam || !map->sum_off) {
		free(map->fam);
		free(map->sum_off);
		return NULL;
	}
	m->nmaps++;
	for (uint32_t i = 0; i < n; i++) {
		const struct kvmstats_stat *st = kvmstats_schema__stat(s, i);
		const struct kvmstats_stat *sum;
		const char *unit;
		char base[160];
		int f = -1;

		map->fam[i] = -1;
		map->sum_off[i] = -1;
		if (!kvmstats_stat__known(st) ||
		    (m->o.no_histograms && is_hist(kvmstats_stat__type(st))) ||
		    !family_name(st, vcpu, base, sizeof(base), &unit)) {
			m->skipped++;
			continue;
		}
		f = find_family(m, base);
		if (f >= 0 && !family_fits(&m->fams[f], s, st)) {
			m->skipped++;	/* same name, other meaning */
			continue;
		}
		if (f < 0)
			f = add_family(m, base, vcpu, s, st, unit);
		if (f < 0)
			return NULL;
		map->fam[i] = f;
		sum = is_hist(kvmstats_stat__type(st)) ? hist_sum(s, st) : NULL;
		if (sum)
			map->sum_off[i] = (int32_t)(kvmstats_stat__offset(sum) / 8);
	}
	return map;
}

struct prom_model *prom_model_new(const struct prom_opts *o)
{
	struct prom_model *m = calloc(1, sizeof(*m));

	if (m && o)
		m->o = *o;
	return m;
}

static void model_clear(struct prom_model *m)
{
	for (size_t i = 0; i < m->nfams; i++)
		family_free(&m->fams[i]);
	free(m->fams);
	for (size_t i = 0; i < m->nmaps; i++) {
		free(m->maps[i].fam);
		free(m->maps[i].sum_off);
	}
	free(m->maps);
	free(m->targets);
	free(m->labels);
	m->fams = NULL;
	m->maps = NULL;
	m->targets = NULL;
	m->labels = NULL;
	m->nfams = m->nmaps = m->ntargets = 0;
	m->labels_len = m->labels_cap = m->max_labels = 0;
	m->vmms = m->skipped = m->series_cut = m->summed_vcpus = 0;
}

void prom_model_free(struct prom_model *m)
{
	if (!m)
		return;
	model_clear(m);
	free(m);
}

static bool selected(const struct prom_model *m, struct kvmstats_vmm *v)
{
	return !m->o.select || m->o.select(m->o.select_arg, v);
}

/* Visit every target of the host in order: fn(m, arg, vmm, vm index,
 * vcpu (-1 for the VM), reader). Stops at the first non-zero return. */
typedef int (*visit_fn)(struct prom_model *m, void *arg,
			struct kvmstats_vmm *v, size_t vm, int vcpu,
			struct kvmstats_reader *r);

static int visit(struct prom_model *m, const struct kvmstats_host *h,
		 visit_fn fn, void *arg)
{
	for (size_t i = 0; i < kvmstats_host__num_vmms(h); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(h, i);

		if (!selected(m, v))
			continue;
		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int err, index;

			if (kvmstats_vm__reader(vm)) {
				err = fn(m, arg, v, j, -1, kvmstats_vm__reader(vm));
				if (err)
					return err;
			}
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
				struct kvmstats_reader *r = kvmstats_vm__vcpu(vm, k, &index);

				/* Index -1 among vCPUs: a sum of them all. */
				err = fn(m, arg, v, j, index < 0 ? PROM_VCPU_SUM : index, r);
				if (err)
					return err;
			}
		}
	}
	return 0;
}

/* Change detection: does the host still hold exactly our targets? */
static int same_target(struct prom_model *m, void *arg, struct kvmstats_vmm *v,
		       size_t vm, int vcpu, struct kvmstats_reader *r)
{
	size_t *k = arg;
	const struct target *t;

	if (*k >= m->ntargets)
		return 1;
	t = &m->targets[(*k)++];
	return t->r != r || t->uid != kvmstats_vmm__uid(v) || t->vm != vm ||
	       t->vcpu != vcpu;
}

static int count_target(struct prom_model *m, void *arg, struct kvmstats_vmm *v,
			size_t vm, int vcpu, struct kvmstats_reader *r)
{
	(void)m, (void)v, (void)vm, (void)vcpu, (void)r;
	(*(size_t *)arg)++;
	return 0;
}

static int put_labels(struct prom_model *m, struct kvmstats_vmm *v, size_t vm,
		      int vcpu)
{
	char name[4 * 128 + 1], text[700];
	int n;

	prom_escape_label(kvmstats_vmm__name(v), name, sizeof(name));
	if (vcpu >= 0)
		n = snprintf(text, sizeof(text), "pid=\"%d\",name=\"%s\",vm=\"%zu\",vcpu=\"%d\"",
			     (int)kvmstats_vmm__pid(v), name, vm, vcpu);
	else if (vcpu == PROM_VCPU_SUM)
		n = snprintf(text, sizeof(text), "pid=\"%d\",name=\"%s\",vm=\"%zu\",vcpu=\"sum\"",
			     (int)kvmstats_vmm__pid(v), name, vm);
	else
		n = snprintf(text, sizeof(text), "pid=\"%d\",name=\"%s\",vm=\"%zu\"",
			     (int)kvmstats_vmm__pid(v), name, vm);
	if (m->labels_cap - m->labels_len < (size_t)n + 1) {
		size_t cap = m->labels_cap ? m->labels_cap * 2 : 65536;
		char *p;

		while (cap - m->labels_len < (size_t)n + 1)
			cap *= 2;
		p = realloc(m->labels, cap);
		if (!p)
			return -ENOMEM;
		m->labels = p;
		m->labels_cap = cap;
	}
	memcpy(m->labels + m->labels_len, text, (size_t)n + 1);
	m->labels_len += (size_t)n + 1;
	if ((size_t)n > m->max_labels)
		m->max_labels = (size_t)n;
	return 0;
}

struct build {
	pid_t last_pid;
	uint64_t last_uid;
	size_t lines, max_lines;	/* of the VMM being added */
	bool summed;	/* the VMM's vCPUs are counted */
};

/* Samples one VMM may export: what a kernel's schemas give (an x86
 * vCPU: about 150 with its three 32-bucket histograms) with room, per
 * vCPU. A VMM's monitor may describe histograms of 256 buckets, and
 * 131k buckets cost a scrape 9.8 MB: past this the rest of the VMM's
 * series are cut, and counted (kvmstats_series_cut). */
#define PROM_VMM_LINES 4096u
#define PROM_VCPU_LINES 512u

static size_t vmm_max_lines(struct kvmstats_vmm *v)
{
	size_t vcpus = 0;

	for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++)
		vcpus += kvmstats_vm__num_vcpus(kvmstats_vmm__vm(v, j));
	return PROM_VMM_LINES + vcpus * PROM_VCPU_LINES;
}

/* vCPUs of a VMM whose vCPU stats come summed: its vCPU fds (all its
 * VMs', counted once per VMM). */
static size_t vcpu_fds(pid_t pid)
{
	struct kvmstats_proc_fd *fds;
	int n = kvmstats_proc__kvm_fds(pid, &fds);
	size_t vcpus = 0;

	for (int i = 0; i < n; i++)
		vcpus += fds[i].kind == KVMSTATS_FD_VCPU;
	if (n >= 0)
		free(fds);
	return vcpus;
}

static int add_target(struct prom_model *m, void *arg, struct kvmstats_vmm *v,
		      size_t vm, int vcpu, struct kvmstats_reader *r)
{
	struct build *b = arg;
	struct target *t = &m->targets[m->ntargets];
	struct schema_map *map;
	uint32_t n;

	*t = (struct target){ .r = r, .uid = kvmstats_vmm__uid(v), .vm = (uint32_t)vm,
			      .vcpu = vcpu,
			      .src = prom_source_index(kvmstats_vmm__source(v)),
			      .labels = (uint32_t)m->labels_len };
	if (put_labels(m, v, vm, vcpu))
		return -ENOMEM;
	t->labels_len = (uint32_t)(m->labels_len - t->labels - 1);
	if (b->last_uid != t->uid) {
		b->last_uid = t->uid;
		b->lines = 0;
		b->max_lines = vmm_max_lines(v);
		b->summed = false;
		m->vmms++;
	}
	if (vcpu == PROM_VCPU_SUM && !b->summed) {
		b->summed = true;
		m->summed_vcpus += vcpu_fds(kvmstats_vmm__pid(v));
	}
	map = get_map(m, kvmstats_reader__schema(r), vcpu != PROM_VM);
	if (!map)
		return -ENOMEM;
	n = map->n;
	for (uint32_t i = 0; i < n; i++) {
		struct family *f;
		const struct kvmstats_stat *st, *sum;

		size_t lines;

		if (map->fam[i] < 0)
			continue;
		f = &m->fams[map->fam[i]];
		lines = f->kind == FAM_HIST ? (size_t)f->size + 2 : 1;
		if (b->lines + lines > b->max_lines) {
			m->series_cut++;
			continue;
		}
		b->lines += lines;
		if (f->nseries == f->cap) {
			size_t cap = f->cap ? f->cap * 2 : 64;
			void *p = realloc(f->series, cap * sizeof(*f->series));

			if (!p)
				return -ENOMEM;
			f->series = p;
			f->cap = cap;
		}
		st = kvmstats_schema__stat(map->s, i);
		sum = map->sum_off[i] >= 0 ? hist_sum(map->s, st) : NULL;
		f->series[f->nseries++] = (struct series){
			.target = (uint32_t)m->ntargets,
			.off = kvmstats_stat__offset(st) / 8,
			.sum_off = sum ? map->sum_off[i] : -1, .stat = i,
			.sum_stat = sum ? kvmstats_stat__index(sum) : 0 };
	}
	m->ntargets++;
	return 0;
}

static int rebuild(struct prom_model *m, const struct kvmstats_host *h)
{
	struct build b = { 0 };
	size_t n = 0;
	int err;

	model_clear(m);
	visit(m, h, count_target, &n);
	m->targets = calloc(n ? n : 1, sizeof(*m->targets));
	if (!m->targets)
		return -ENOMEM;
	err = visit(m, h, add_target, &b);
	if (err)
		model_clear(m);
	return err;
}

int prom_model_update(struct prom_model *m, const struct kvmstats_host *h)
{
	size_t k = 0;
	int err;

	if (m->targets && !visit(m, h, same_target, &k) && k == m->ntargets)
		return 0;
	err = rebuild(m, h);
	return err ? err : 1;
}

/* A reading that gave none of its target's counters is a failed read: its
 * series are left out, and the read-error counter (and its alert) says
 * so, rather than the VM looking idle or absent. */
void prom_model_prepare(struct prom_model *m)
{
	size_t series = 0;

	memset(m->src_vms, 0, sizeof(m->src_vms));
	memset(m->src_errors, 0, sizeof(m->src_errors));
	memset(m->src_age_ns, 0, sizeof(m->src_age_ns));
	memset(m->src_read, 0, sizeof(m->src_read));
	for (size_t i = 0; i < m->ntargets; i++) {
		struct target *t = &m->targets[i];
		const struct kvmstats_sample *cur = kvmstats_reader__cur(t->r);
		uint64_t age;

		if (t->vcpu == PROM_VM)
			m->src_vms[t->src]++;
		if (kvmstats_reader__error(t->r) || !cur) {
			m->src_errors[t->src]++;
			t->data = NULL;
			continue;
		}
		t->data = cur->data;
		t->missing = kvmstats_reader__missing(t->r);
		if (kvmstats_reader__no_counter(t->r))
			m->src_errors[t->src]++;
		m->src_read[t->src]++;
		age = kvmstats_reader__age_ns(t->r);
		if (age > m->src_age_ns[t->src])
			m->src_age_ns[t->src] = age;
	}
	for (size_t i = 0; i < m->nfams; i++)
		series += m->fams[i].nseries;
	m->series = series;
}

size_t prom_model_families(const struct prom_model *m)
{
	return m->nfams;
}


void prom_model_stats(const struct prom_model *m, struct prom_model_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->vmms = m->vmms;
	for (size_t i = 0; i < m->ntargets; i++) {
		if (m->targets[i].vcpu == PROM_VM)
			st->vms++;
		else if (m->targets[i].vcpu >= 0)
			st->vcpus++;
	}
	/* A sum stands for every vCPU of its VMM, counted from its fds. */
	st->vcpus += m->summed_vcpus;
	st->families = m->nfams;
	st->series = m->series;
	st->skipped_stats = m->skipped;
	st->series_cut = m->series_cut;
	memcpy(st->src_vms, m->src_vms, sizeof(m->src_vms));
	memcpy(st->src_errors, m->src_errors, sizeof(m->src_errors));
	memcpy(st->src_age_ns, m->src_age_ns, sizeof(m->src_age_ns));
	memcpy(st->src_read, m->src_read, sizeof(m->src_read));
}

