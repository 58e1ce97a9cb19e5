// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * KVM stats as Prometheus metrics.
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
 * Values are printed exactly: a power-of-ten exponent moves the decimal
 * point of the integer (1023 ns -> 0.000001023), it never goes through
 * a double. A log2 bucket i holds the integers [2^(i-1), 2^i), so its
 * inclusive upper bound (Prometheus' le) is 2^i - 1 raw units; a linear
 * bucket i holds [i*size, (i+1)*size), le = (i+1)*size - 1. The kernel's
 * last bucket takes every larger value: it is the +Inf bucket.
 *
 * Speed: the model is built once per change of the host (families,
 * series, label strings), and a rendering is memcpy of prebuilt strings
 * plus integer formatting into a reused buffer.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include "prom.h"
#include "sanitize.h"

/* ---- buffers ------------------------------------------------------------ */

bool prom_buf_reserve(struct prom_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->failed)
		return false;
	if (b->cap - b->len >= more)
		return true;
	cap = b->cap ? b->cap : 4096;
	while (cap - b->len < more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void prom_buf_free(struct prom_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

void prom_buf_put(struct prom_buf *b, const char *s, size_t n)
{
	if (!prom_buf_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void prom_buf_puts(struct prom_buf *b, const char *s)
{
	prom_buf_put(b, s, strlen(s));
}

void prom_buf_printf(struct prom_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !prom_buf_reserve(b, (size_t)n + 1))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* ---- numbers -------------------------------------------------------------- */

static const char digits2[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

size_t prom_u64(char *p, uint64_t v)
{
	char tmp[20];
	char *w = tmp + sizeof(tmp);
	size_t n;

	while (v >= 100) {
		unsigned int d = (unsigned int)(v % 100) * 2;

		v /= 100;
		*--w = digits2[d + 1];
		*--w = digits2[d];
	}
	if (v >= 10) {
		*--w = digits2[v * 2 + 1];
		*--w = digits2[v * 2];
	} else {
		*--w = (char)('0' + v);
	}
	n = (size_t)(tmp + sizeof(tmp) - w);
	memcpy(p, w, n);
	return n;
}

static const uint64_t pow10_u64[20] = {
	1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull,
	10000000ull, 100000000ull, 1000000000ull, 10000000000ull,
	100000000000ull, 1000000000000ull, 10000000000000ull,
	100000000000000ull, 1000000000000000ull, 10000000000000000ull,
	100000000000000000ull, 1000000000000000000ull,
	10000000000000000000ull,
};

enum scale_mode { SCALE_NONE, SCALE_POW10, SCALE_POW2 };

struct scale {
	uint8_t mode;
	int16_t exp;
};

/* Shortest text that reads back as @v, laid out as Go's strconv 'g' with
 * precision -1 does (exponent form below 1e-4 and from 1e+06 on), which
 * OpenMetrics takes as the canonical form of le; OpenMetrics also wants
 * ".0" on an integral value. */
static void fmt_double(double v, char *buf, size_t len, bool om)
{
	char tmp[40], mant[24], out[64];
	char *w = out, *e;
	int prec, exp, nd = 0;

	if (isinf(v)) {
		snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "%s", om ? "0.0" : "0");
		return;
	}
	for (prec = 0; prec < 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	/* tmp is [-]d[.ddd]e[+-]xx: take the digits and the exponent. */
	e = strchr(tmp, 'e');
	for (char *p = tmp; e && p < e; p++)
		if (*p >= '0' && *p <= '9')
			mant[nd++] = *p;
	if (!e || !nd) {	/* not a finite number: NaN */
		snprintf(buf, len, "NaN");
		return;
	}
	exp = atoi(e + 1);
	if (v < 0)
		*w++ = '-';
	if (exp < -4 || exp >= 6) {
		*w++ = mant[0];
		if (nd > 1) {
			*w++ = '.';
			memcpy(w, mant + 1, (size_t)nd - 1);
			w += nd - 1;
		}
		w += sprintf(w, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	} else if (exp < 0) {
		*w++ = '0';
		*w++ = '.';
		for (int i = 0; i < -exp - 1; i++)
			*w++ = '0';
		memcpy(w, mant, (size_t)nd);
		w += nd;
	} else if (nd <= exp + 1) {
		memcpy(w, mant, (size_t)nd);
		w += nd;
		for (int i = 0; i < exp + 1 - nd; i++)
			*w++ = '0';
		if (om) {
			*w++ = '.';
			*w++ = '0';
		}
	} else {
		memcpy(w, mant, (size_t)exp + 1);
		w += exp + 1;
		*w++ = '.';
		memcpy(w, mant + exp + 1, (size_t)(nd - exp - 1));
		w += nd - exp - 1;
	}
	*w = 0;
	snprintf(buf, len, "%s", out);
}

/* A raw integer in base units as the nearest double: dividing by an exact
 * power of ten (not multiplying by an inexact 1e-9) keeps 1023 ns at the
 * double closest to 1.023e-06. */
static double scaled_double(uint64_t raw, struct scale sc)
{
	if (sc.mode == SCALE_POW2)
		return ldexp((double)raw, sc.exp);
	if (sc.mode == SCALE_POW10 && sc.exp < 0 && sc.exp >= -22)
		return (double)raw / pow(10, -sc.exp);
	if (sc.mode == SCALE_POW10)
		return (double)raw * pow(10, sc.exp);
	return (double)raw;
}

/* @raw in base units, exactly when that can be done in integers. */
static size_t put_scaled(char *p, uint64_t raw, struct scale sc)
{
	char *w = p;
	int k = sc.exp;

	if (sc.mode == SCALE_NONE || k == 0)
		return prom_u64(p, raw);
	if (sc.mode == SCALE_POW10 && k < 0 && k >= -19) {
		uint64_t div = pow10_u64[-k], ip = raw / div, fr = raw % div;
		char frac[20];

		w += prom_u64(w, ip);
		if (!fr)
			return (size_t)(w - p);
		for (int i = -k - 1; i >= 0; i--) {
			frac[i] = (char)('0' + fr % 10);
			fr /= 10;
		}
		k = -k;
		while (frac[k - 1] == '0')
			k--;
		*w++ = '.';
		memcpy(w, frac, (size_t)k);
		return (size_t)(w + k - p);
	}
	if (sc.mode == SCALE_POW10 && k > 0 && k <= 19 &&
	    raw <= UINT64_MAX / pow10_u64[k])
		return prom_u64(p, raw * pow10_u64[k]);
	if (sc.mode == SCALE_POW2 && k > 0 && k < 64 && raw <= (UINT64_MAX >> k))
		return prom_u64(p, raw << k);
	/* Out of integer range: a double, full precision. */
	return (size_t)snprintf(p, 32, "%.17g", scaled_double(raw, sc));
}

/* ---- label values ---------------------------------------------------------- */

/* A name, escaped as every sink escapes it (sanitize.c: valid UTF-8, no
 * control character; Prometheus rejects a whole scrape over one bad
 * byte), then as the exposition formats want: \\ and \". */
size_t prom_escape_label(const char *s, char *out, size_t len)
{
	char *clean = str_clean(s) ? NULL : malloc(str_escaped_size(s));
	const char *u = s;
	size_t o = 0;

	if (clean) {
		str_escape(clean, str_escaped_size(s), s);
		u = clean;
	}
	/* Whole characters only: a label is cut short, never made invalid. */
	while (*u) {
		size_t n = utf8_seq_len((const unsigned char *)u);
		bool quote = *u == '\\' || *u == '"';

		if (o + n + quote + 1 > len)
			break;
		if (quote)
			out[o++] = '\\';
		memcpy(out + o, u, n);
		o += n;
		u += n;
	}
	out[o] = 0;
	free(clean);
	return o;
}

/* HELP text: backslash and newline escaped (and quotes in OpenMetrics). */
static void put_help(struct prom_buf *b, const char *s, enum prom_format f)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '\n' || (*s == '"' && f == PROM_OPENMETRICS)) {
			prom_buf_put(b, "\\", 1);
			prom_buf_put(b, *s == '\n' ? "n" : s, 1);
		} else {
			prom_buf_put(b, s, 1);
		}
	}
}

/* ---- writers for the exporter's own metrics ------------------------------- */

void prom_family(struct prom_buf *b, enum prom_format f, const char *name,
		 const char *type, const char *unit, const char *help)
{
	bool counter = !strcmp(type, "counter");
	const char *sfx = counter && f == PROM_TEXT ? "_total" : "";

	if (f == PROM_OPENMETRICS) {
		prom_buf_printf(b, "# TYPE %s %s\n", name, type);
		if (unit)
			prom_buf_printf(b, "# UNIT %s %s\n", name, unit);
	}
	prom_buf_printf(b, "# HELP %s%s ", name, sfx);
	put_help(b, help, f);
	prom_buf_put(b, "\n", 1);
	if (f == PROM_TEXT)
		prom_buf_printf(b, "# TYPE %s%s %s\n", name, sfx, type);
}

void prom_sample(struct prom_buf *b, const char *name, const char *labels,
		 double v)
{
	char num[48];

	if (isnan(v))
		snprintf(num, sizeof(num), "NaN");
	else
		fmt_double(v, num, sizeof(num), false);
	if (labels && *labels)
		prom_buf_printf(b, "%s{%s} %s\n", name, labels, num);
	else
		prom_buf_printf(b, "%s %s\n", name, num);
}

void prom_sample_u64(struct prom_buf *b, const char *name, const char *labels,
		     uint64_t v)
{
	if (labels && *labels)
		prom_buf_printf(b, "%s{%s} %llu\n", name, labels, (unsigned long long)v);
	else
		prom_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void prom_end(struct prom_buf *b, enum prom_format f)
{
	if (f == PROM_OPENMETRICS)
		prom_buf_puts(b, "# EOF\n");
}

/* ---- the model ------------------------------------------------------------- */

enum fam_kind { FAM_COUNTER, FAM_GAUGE, FAM_BOOL, FAM_HIST };

/* One metric: a stat of one target. Offsets count u64 words. */
struct series {
	uint32_t target;
	uint32_t off;
	int32_t sum_off;	/* the histogram's sum stat, or -1 */
	uint32_t stat;		/* index, for the missing bitmap */
};

struct family {
	char *base;		/* OpenMetrics family name, e.g. kvm_vcpu_exits */
	enum fam_kind kind;
	bool vcpu;
	/* What makes two schemas' stats one family. */
	uint32_t flags;
	int16_t exp;
	uint16_t size;
	uint32_t bucket_size;
	struct scale scale;
	char *hdr[2];		/* HELP/TYPE/UNIT lines per format */
	size_t hdr_len[2];
	char *sample;		/* "kvm_vcpu_exits_total{" (same in both) */
	size_t sample_len;
	/* Histograms. */
	char *count_name, *sum_name;	/* "x_count{", "x_sum{" */
	size_t count_len, sum_len;
	char **le[2];		/* per bucket: `,le="..."} ` */
	uint8_t *le_len[2];
	bool has_sum;
	struct scale sum_scale;
	struct series *series;
	size_t nseries, cap;
};

struct target {
	struct kvmstats_reader *r;
	uint64_t uid;
	uint32_t vm;
	int32_t vcpu;		/* -1: the VM's own stats */
	unsigned int src;
	uint32_t labels;	/* offset in the model's label text */
	uint32_t labels_len;
	/* Set by prom_model_prepare(). */
	const uint64_t *data;
	const uint64_t *missing;
};

/* A schema's stats mapped to families, computed once per schema. */
struct schema_map {
	const struct kvmstats_schema *s;
	bool vcpu;
	uint32_t n;		/* stats in s */
	int32_t *fam;		/* per stat: family index, or -1 */
	int32_t *sum_off;	/* per stat: the sum's word offset, or -1 */
};

struct vmm_info {
	uint64_t uid;
	pid_t pid;
	char name[128];
	const char *source;
};

struct prom_model {
	struct prom_opts o;
	struct family *fams;
	size_t nfams;
	struct target *targets;
	size_t ntargets;
	struct schema_map *maps;
	size_t nmaps;
	char *labels;
	size_t labels_len, labels_cap;
	size_t max_labels;
	size_t vmms;
	size_t skipped;
	size_t series;
	size_t src_vms[PROM_NSRC];
	size_t src_errors[PROM_NSRC];
	uint64_t src_age_ns[PROM_NSRC];
};

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

static int family_headers(struct family *f, const char *kname, const char *unit,
			  const struct kvmstats_stat *st)
{
	static const char *const types[] = { "counter", "gauge", "gauge",
					     "histogram" };
	const char *what = stat_help(kname);
	char help[384];

	snprintf(help, sizeof(help), "%s%sKVM %s stat %s (%s%s%s)",
		 what ? what : "", what ? ". " : "", f->vcpu ? "vCPU" : "VM", kname,
		 kvmstats_type_str(kvmstats_stat__type(st)),
		 kvmstats_stat__exponent(st) || unit ? ", in " : "",
		 unit ? unit : kvmstats_stat__exponent(st) ? "base units" : "");
	if (f->kind == FAM_HIST && !f->has_sum)
		snprintf(help + strlen(help), sizeof(help) - strlen(help),
			 "; its sum is not known");
	for (int fmt = PROM_TEXT; fmt <= PROM_OPENMETRICS; fmt++) {
		struct prom_buf b = { 0 };

		prom_family(&b, fmt, f->base, types[f->kind],
			    unit && fmt == PROM_OPENMETRICS ? unit : NULL, help);
		prom_buf_put(&b, "", 1);
		if (b.failed)
			return -ENOMEM;
		f->hdr[fmt] = b.p;
		f->hdr_len[fmt] = b.len - 1;
	}
	return 0;
}

static int family_buckets(struct family *f, const struct kvmstats_stat *st)
{
	for (int fmt = PROM_TEXT; fmt <= PROM_OPENMETRICS; fmt++) {
		f->le[fmt] = calloc(f->size, sizeof(char *));
		f->le_len[fmt] = calloc(f->size, 1);
		if (!f->le[fmt] || !f->le_len[fmt])
			return -ENOMEM;
		for (uint32_t i = 0; i < f->size; i++) {
			double lo, hi, le;
			char num[48], frag[64];

			kvmstats_hist__bucket_bounds(st, i, &lo, &hi);
			/* Raw values are integers: < hi is <= hi - 1. */
			le = i + 1 == f->size ? INFINITY
					      : scaled_double((uint64_t)hi - 1, f->scale);
			fmt_double(le, num, sizeof(num), fmt == PROM_OPENMETRICS);
			snprintf(frag, sizeof(frag), ",le=\"%s\"} ", num);
			f->le[fmt][i] = strdup(frag);
			if (!f->le[fmt][i])
				return -ENOMEM;
			f->le_len[fmt][i] = (uint8_t)strlen(frag);
		}
	}
	return 0;
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
	char name[200];

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
	if (family_headers(f, kvmstats_stat__name(st), unit, st))
		return -ENOMEM;
	return f->kind == FAM_HIST ? family_buckets(f, st) : 0;
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
	m->vmms = m->skipped = 0;
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

				err = fn(m, arg, v, j, index, r);
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
};

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
		m->vmms++;
	}
	map = get_map(m, kvmstats_reader__schema(r), vcpu >= 0);
	if (!map)
		return -ENOMEM;
	n = map->n;
	for (uint32_t i = 0; i < n; i++) {
		struct family *f;
		const struct kvmstats_stat *st;

		if (map->fam[i] < 0)
			continue;
		f = &m->fams[map->fam[i]];
		if (f->nseries == f->cap) {
			size_t cap = f->cap ? f->cap * 2 : 64;
			void *p = realloc(f->series, cap * sizeof(*f->series));

			if (!p)
				return -ENOMEM;
			f->series = p;
			f->cap = cap;
		}
		st = kvmstats_schema__stat(map->s, i);
		f->series[f->nseries++] = (struct series){
			.target = (uint32_t)m->ntargets,
			.off = kvmstats_stat__offset(st) / 8,
			.sum_off = map->sum_off[i], .stat = i };
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

void prom_model_prepare(struct prom_model *m)
{
	size_t series = 0;

	memset(m->src_vms, 0, sizeof(m->src_vms));
	memset(m->src_errors, 0, sizeof(m->src_errors));
	memset(m->src_age_ns, 0, sizeof(m->src_age_ns));
	for (size_t i = 0; i < m->ntargets; i++) {
		struct target *t = &m->targets[i];
		const struct kvmstats_sample *cur = kvmstats_reader__cur(t->r);
		uint64_t age;

		if (t->vcpu < 0)
			m->src_vms[t->src]++;
		if (kvmstats_reader__error(t->r) || !cur) {
			m->src_errors[t->src]++;
			t->data = NULL;
			continue;
		}
		t->data = cur->data;
		t->missing = kvmstats_reader__missing(t->r);
		age = kvmstats_reader__age_ns(t->r);
		if (age > m->src_age_ns[t->src])
			m->src_age_ns[t->src] = age;
	}
	for (size_t i = 0; i < m->nfams; i++)
		series += m->fams[i].nseries;
	m->series = series;
}

static bool missing(const struct target *t, uint32_t stat)
{
	return t->missing && (t->missing[stat / 64] >> (stat % 64)) & 1;
}

/* One scalar sample. @w has room for it (see render_family). */
static char *put_scalar(char *w, const struct family *f, const struct target *t,
			const char *labels, uint64_t v)
{
	memcpy(w, f->sample, f->sample_len);
	w += f->sample_len;
	memcpy(w, labels, t->labels_len);
	w += t->labels_len;
	*w++ = '}';
	*w++ = ' ';
	if (f->kind == FAM_BOOL)
		*w++ = v ? '1' : '0';
	else
		w += put_scaled(w, v, f->scale);
	*w++ = '\n';
	return w;
}

static char *put_hist(char *w, const struct family *f, const struct target *t,
		      const char *labels, const uint64_t *v, const uint64_t *data,
		      int32_t sum_off, enum prom_format fmt)
{
	uint64_t cum = 0;

	for (uint32_t i = 0; i < f->size; i++) {
		cum += v[i];
		memcpy(w, f->sample, f->sample_len);
		w += f->sample_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		memcpy(w, f->le[fmt][i], f->le_len[fmt][i]);
		w += f->le_len[fmt][i];
		w += prom_u64(w, cum);
		*w++ = '\n';
	}
	if (sum_off >= 0) {
		memcpy(w, f->sum_name, f->sum_len);
		w += f->sum_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		*w++ = '}';
		*w++ = ' ';
		w += put_scaled(w, data[sum_off], f->sum_scale);
		*w++ = '\n';
	}
	/* OpenMetrics: _count if and only if there is a _sum. */
	if (sum_off >= 0 || fmt == PROM_TEXT) {
		memcpy(w, f->count_name, f->count_len);
		w += f->count_len;
		memcpy(w, labels, t->labels_len);
		w += t->labels_len;
		*w++ = '}';
		*w++ = ' ';
		w += prom_u64(w, cum);
		*w++ = '\n';
	}
	return w;
}

/* Series [lo, hi) of family @f; its header when lo is 0. */
static void render_family(const struct prom_model *m, const struct family *f,
			  enum prom_format fmt, size_t lo, size_t hi,
			  struct prom_buf *out)
{
	/* The longest sample: name, labels, le, a number, punctuation. */
	size_t line = f->sample_len + f->sum_len + f->count_len + m->max_labels + 96;
	size_t room = f->kind == FAM_HIST ? line * (f->size + 2) : line;

	if (!lo)
		prom_buf_put(out, f->hdr[fmt], f->hdr_len[fmt]);
	for (size_t i = lo; i < hi; i++) {
		const struct series *s = &f->series[i];
		const struct target *t = &m->targets[s->target];
		const char *labels = m->labels + t->labels;
		char *w;

		if (!t->data || missing(t, s->stat))
			continue;
		if (!prom_buf_reserve(out, room))
			return;
		w = out->p + out->len;
		if (f->kind == FAM_HIST)
			w = put_hist(w, f, t, labels, t->data + s->off, t->data,
				     s->sum_off, fmt);
		else
			w = put_scalar(w, f, t, labels, t->data[s->off]);
		out->len = (size_t)(w - out->p);
	}
}

/* Lines a series takes: the unit of work when a rendering is split. */
static size_t series_lines(const struct family *f)
{
	return f->kind == FAM_HIST ? (size_t)f->size + 2 : 1;
}

size_t prom_model_lines(const struct prom_model *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nfams; i++)
		n += m->fams[i].nseries * series_lines(&m->fams[i]);
	return n;
}

/* Where part @k of @n starts: family *fam, series *ser (a family may be
 * cut between two parts; its header goes with its first series). */
static void part_start(const struct prom_model *m, size_t k, size_t n,
		       size_t *fam, size_t *ser)
{
	size_t goal = n ? prom_model_lines(m) / n * k : 0, done = 0;

	for (size_t i = 0; i < m->nfams; i++) {
		const struct family *f = &m->fams[i];
		size_t lines = f->nseries * series_lines(f);

		if (k && done + lines > goal) {
			*fam = i;
			*ser = (goal - done) / series_lines(f);
			return;
		}
		done += lines;
	}
	*fam = k ? m->nfams : 0;
	*ser = 0;
}

void prom_model_render_part(const struct prom_model *m, enum prom_format fmt,
			    size_t k, size_t n, struct prom_buf *out)
{
	size_t f0, s0, f1, s1;

	part_start(m, k, n, &f0, &s0);
	if (k + 1 < n)
		part_start(m, k + 1, n, &f1, &s1);
	else
		f1 = m->nfams, s1 = 0;
	for (size_t i = f0; i < m->nfams && (i < f1 || (i == f1 && s1)); i++) {
		const struct family *f = &m->fams[i];
		size_t lo = i == f0 ? s0 : 0, hi = i == f1 ? s1 : f->nseries;

		render_family(m, f, fmt, lo, hi, out);
	}
}

size_t prom_model_families(const struct prom_model *m)
{
	return m->nfams;
}

void prom_model_render_info(const struct prom_model *m, enum prom_format fmt,
			    struct prom_buf *out)
{
	prom_family(out, fmt, "kvmstats_vm_info", "gauge", NULL,
		    "Each VM that is exported: its stats id and the source "
		    "that reads it (always 1)");
	for (size_t i = 0; i < m->ntargets; i++) {
		const struct target *t = &m->targets[i];
		char id[4 * 256 + 1];

		if (t->vcpu >= 0)
			continue;
		prom_escape_label(kvmstats_reader__id(t->r), id, sizeof(id));
		prom_buf_printf(out, "kvmstats_vm_info{%s,id=\"%s\",source=\"%s\"} 1\n",
				m->labels + t->labels, id,
				t->src < PROM_NSRC - 1 ? src_names[t->src] : "other");
	}
}

void prom_model_stats(const struct prom_model *m, struct prom_model_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->vmms = m->vmms;
	for (size_t i = 0; i < m->ntargets; i++) {
		if (m->targets[i].vcpu < 0)
			st->vms++;
		else
			st->vcpus++;
	}
	st->families = m->nfams;
	st->series = m->series;
	st->skipped_stats = m->skipped;
	memcpy(st->src_vms, m->src_vms, sizeof(m->src_vms));
	memcpy(st->src_errors, m->src_errors, sizeof(m->src_errors));
	memcpy(st->src_age_ns, m->src_age_ns, sizeof(m->src_age_ns));
}

/* ---- threads ------------------------------------------------------------ */

struct prom_pool {
	unsigned int nthreads;		/* including the caller's */
	unsigned int started;
	pthread_t *tids;
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	uint64_t gen;
	unsigned int busy;
	bool stop;
	/* The job: fn(arg, i) for every i < njobs. */
	void (*fn)(void *arg, size_t i);
	void *arg;
	size_t njobs;
	atomic_size_t next;
	/* Deflate streams, one per part, reused by every gzip. */
	z_stream *z[PROM_MAX_PARTS + 1];
	int zlevel[PROM_MAX_PARTS + 1];
};

static void pool_jobs(struct prom_pool *p)
{
	for (;;) {
		size_t i = atomic_fetch_add(&p->next, 1);

		if (i >= p->njobs)
			return;
		p->fn(p->arg, i);
	}
}

static void *pool_worker(void *arg)
{
	struct prom_pool *p = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->lock);
		pool_jobs(p);
		pthread_mutex_lock(&p->lock);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct prom_pool *prom_pool_new(unsigned int threads)
{
	struct prom_pool *p = calloc(1, sizeof(*p));
	sigset_t all, old;

	if (!p)
		return NULL;
	if (!threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		threads = n < 1 ? 1 : n > PROM_MAX_PARTS ? PROM_MAX_PARTS : (unsigned int)n;
	}
	if (threads > PROM_MAX_PARTS)
		threads = PROM_MAX_PARTS;
	p->tids = calloc(threads, sizeof(*p->tids));
	if (!p->tids) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	/* Signals belong to the main thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned int i = 1; i < threads; i++) {
		if (pthread_create(&p->tids[p->started], NULL, pool_worker, p))
			break;
		p->started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	p->nthreads = p->started + 1;
	return p;
}

void prom_pool_free(struct prom_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < p->started; i++)
		pthread_join(p->tids[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	for (size_t i = 0; i <= PROM_MAX_PARTS; i++) {
		if (p->z[i])
			deflateEnd(p->z[i]);
		free(p->z[i]);
	}
	free(p->tids);
	free(p);
}

unsigned int prom_pool_threads(const struct prom_pool *p)
{
	return p ? p->nthreads : 1;
}

void prom_pool_run(struct prom_pool *p, size_t njobs,
		   void (*fn)(void *arg, size_t i), void *arg)
{
	struct prom_pool one = { .fn = fn, .arg = arg, .njobs = njobs };

	if (!p || p->started == 0 || njobs < 2) {
		pool_jobs(&one);
		return;
	}
	p->fn = fn;
	p->arg = arg;
	p->njobs = njobs;
	atomic_store(&p->next, 0);
	pthread_mutex_lock(&p->lock);
	p->busy = p->started;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	pool_jobs(p);
	pthread_mutex_lock(&p->lock);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

/* ---- expositions: rendered in parts, gzipped in parts -------------------- */

void prom_expo_reset(struct prom_expo *e, enum prom_format fmt)
{
	e->fmt = fmt;
	e->nparts = 0;
	e->gz_ready = false;
	for (size_t i = 0; i < PROM_MAX_PARTS + 1; i++) {
		e->part[i].len = 0;
		e->part[i].failed = false;
		e->zpart[i].len = 0;
		e->zpart[i].failed = false;
	}
}

void prom_expo_free(struct prom_expo *e)
{
	for (size_t i = 0; i < PROM_MAX_PARTS + 1; i++) {
		prom_buf_free(&e->part[i]);
		prom_buf_free(&e->zpart[i]);
	}
}

struct render_job {
	const struct prom_model *m;
	struct prom_expo *e;
	size_t n;
};

static void render_job(void *arg, size_t i)
{
	struct render_job *j = arg;

	prom_model_render_part(j->m, j->e->fmt, i, j->n, &j->e->part[i]);
}

int prom_expo_render(struct prom_pool *pool, const struct prom_model *m,
		     struct prom_expo *e)
{
	struct render_job j = { m, e, prom_pool_threads(pool) };

	/* Small hosts: one part, no thread woken. */
	if (prom_model_lines(m) < 20000)
		j.n = 1;
	e->nparts = j.n;
	prom_pool_run(pool, j.n, render_job, &j);
	for (size_t i = 0; i < j.n; i++)
		if (e->part[i].failed)
			return -ENOMEM;
	return 0;
}

struct prom_buf *prom_expo_tail(struct prom_expo *e)
{
	return &e->part[e->nparts];
}

size_t prom_expo_len(const struct prom_expo *e, bool gz)
{
	size_t n = gz ? sizeof(e->gz_head) + sizeof(e->gz_tail) : 0;

	if (gz && !e->gz_ready)
		return 0;

	for (size_t i = 0; i <= e->nparts; i++)
		n += gz ? e->zpart[i].len : e->part[i].len;
	return n;
}

/*
 * One gzip member from independently deflated parts, as pigz does it:
 * each part is a raw deflate stream of its own; all but the last end with
 * a sync flush (an empty stored block, which leaves the stream byte
 * aligned and open), the last with the final block. Concatenated they are
 * one valid deflate stream, since no part refers back past its own start;
 * the CRC-32 of the whole is combined from the parts' (crc32_combine).
 */
struct gz_job {
	struct prom_pool *pool;
	const struct prom_expo *src;
	struct prom_expo *dst;
	int level;
	uint32_t crc[PROM_MAX_PARTS + 1];
	int err[PROM_MAX_PARTS + 1];
};

/* A raw deflate stream for part @i: the pool keeps one per part, so that
 * a scrape allocates nothing (a stream is about 270 KiB at level 1). */
static z_stream *get_stream(struct prom_pool *p, size_t i, int level,
			    z_stream *local)
{
	z_stream *z = p ? p->z[i] : NULL;

	if (z && p->zlevel[i] == level && deflateReset(z) == Z_OK)
		return z;
	if (z) {
		deflateEnd(z);
		free(z);
		p->z[i] = NULL;
	}
	z = p ? calloc(1, sizeof(*z)) : local;
	if (!z)
		return NULL;
	memset(z, 0, sizeof(*z));
	if (deflateInit2(z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		if (p)
			free(z);
		return NULL;
	}
	if (p) {
		p->z[i] = z;
		p->zlevel[i] = level;
	}
	return z;
}

static int deflate_part(z_stream *z, const struct prom_buf *in,
			struct prom_buf *out, bool last)
{
	size_t left = in->len;
	int ret;

	out->len = 0;
	if (!prom_buf_reserve(out, deflateBound(z, in->len) + 16))
		return -ENOMEM;
	z->next_in = (unsigned char *)in->p;
	z->avail_in = 0;
	z->next_out = (unsigned char *)out->p;
	z->avail_out = (uInt)(out->cap > UINT32_MAX ? UINT32_MAX : out->cap);
	do {
		/* avail_in is 32 bits: feed a huge part in pieces. */
		if (!z->avail_in && left) {
			z->avail_in = left > (1u << 30) ? 1u << 30 : (uInt)left;
			left -= z->avail_in;
		}
		ret = deflate(z, left ? Z_NO_FLUSH : last ? Z_FINISH : Z_SYNC_FLUSH);
	} while (ret == Z_OK && (left || z->avail_in || last));
	out->len = z->total_out;
	if (left || z->avail_in)
		return -EIO;
	return ret == (last ? Z_STREAM_END : Z_OK) ? 0 : -EIO;
}

static void gz_job(void *arg, size_t i)
{
	struct gz_job *j = arg;
	const struct prom_buf *in = &j->src->part[i];

	j->crc[i] = (uint32_t)crc32(0, (const unsigned char *)in->p, (uInt)0);
	for (size_t o = 0; o < in->len;) {
		size_t n = in->len - o > (1u << 30) ? 1u << 30 : in->len - o;

		j->crc[i] = (uint32_t)crc32(j->crc[i], (const unsigned char *)in->p + o,
					    (uInt)n);
		o += n;
	}
	{
		z_stream local, *z = get_stream(j->pool, i, j->level, &local);

		j->err[i] = z ? deflate_part(z, in, &j->dst->zpart[i], i == j->src->nparts)
			      : -ENOMEM;
		if (z == &local)
			deflateEnd(z);
	}
}

int prom_expo_gzip(struct prom_pool *pool, const struct prom_expo *src,
		   struct prom_expo *dst, int level)
{
	struct gz_job j = { .pool = pool, .src = src, .dst = dst, .level = level };
	uint32_t crc = 0;
	uint64_t total = 0;

	if (dst->gz_ready)
		return 0;
	dst->nparts = src->nparts;
	prom_pool_run(pool, src->nparts + 1, gz_job, &j);
	for (size_t i = 0; i <= src->nparts; i++) {
		if (j.err[i])
			return j.err[i];
		crc = (uint32_t)crc32_combine(crc, j.crc[i], (z_off_t)src->part[i].len);
		total += src->part[i].len;
	}
	/* RFC 1952: magic, deflate, no flags, no mtime, no extra flags, Unix. */
	memcpy(dst->gz_head, "\x1f\x8b\x08\0\0\0\0\0\0\x03", 10);
	for (int b = 0; b < 4; b++) {
		dst->gz_tail[b] = (unsigned char)(crc >> (8 * b));
		dst->gz_tail[4 + b] = (unsigned char)(total >> (8 * b));
	}
	dst->gz_ready = true;
	return 0;
}

size_t prom_expo_iov(const struct prom_expo *e, bool gz, struct iovec *iov,
		     size_t max)
{
	size_t n = 0;

	if (gz && n < max)
		iov[n++] = (struct iovec){ (void *)e->gz_head, sizeof(e->gz_head) };
	for (size_t i = 0; i <= e->nparts && n < max; i++) {
		const struct prom_buf *b = gz ? &e->zpart[i] : &e->part[i];

		if (b->len)
			iov[n++] = (struct iovec){ b->p, b->len };
	}
	if (gz && n < max)
		iov[n++] = (struct iovec){ (void *)e->gz_tail, sizeof(e->gz_tail) };
	return n;
}
