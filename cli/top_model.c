// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top: the model (what every target read, kept per VM and
 * vCPU) and the delta step (rates, totals and interval histograms).
 *
 * Sources feed copies of their data blocks, so that a live sweep and a
 * recorded log go through exactly the same code, and so that no pointer
 * into the library's VMM objects outlives a host refresh: VMs are keyed
 * by (VMM uid, VM index).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sanitize.h"
#include "top.h"

static uint32_t model_cols(const struct top_model *m);

void model_init(struct top_model *m, bool include_past)
{
	memset(m, 0, sizeof(*m));
	m->include_past = include_past;
	m->cols = model_cols(m);
}

static void series_free(struct top_series *s)
{
	if (s->schema)
		kvmstats_schema__put(s->schema);
	free(s->cur);
	free(s->prev);
	free(s->base);
	free(s->missing);
	free(s->prev_missing);
	free(s->base_missing);
	s->schema = NULL;
	s->cur = s->prev = s->base = NULL;
	s->missing = s->prev_missing = s->base_missing = NULL;
	s->base_pending = false;
	s->all_missing = false;
	s->n = 0;
}

static void vm_free(struct top_vm *vm)
{
	series_free(&vm->stats);
	series_free(&vm->sum);
	free(vm->peak);
	for (size_t i = 0; i < vm->nvcpus; i++)
		series_free(&vm->vcpus[i]);
	free(vm->vcpus);
	free(vm);
}

void model_free(struct top_model *m)
{
	for (size_t i = 0; i < m->nvms; i++)
		vm_free(m->vms[i]);
	free(m->vms);
	m->vms = NULL;
	m->nvms = 0;
}

void model_begin(struct top_model *m)
{
	for (size_t i = 0; i < m->nvms; i++) {
		struct top_vm *vm = m->vms[i];

		vm->seen = false;
		vm->stats.fresh = false;
		for (size_t j = 0; j < vm->nvcpus; j++)
			vm->vcpus[j].fresh = false;
	}
}

struct top_vm *model_find(const struct top_model *m, uint64_t uid, int vm)
{
	for (size_t i = 0; i < m->nvms; i++)
		if (m->vms[i]->uid == uid && m->vms[i]->vm == vm)
			return m->vms[i];
	return NULL;
}

struct top_vm *model_vm(struct top_model *m, uint64_t uid, int index)
{
	struct top_vm *vm = model_find(m, uid, index);
	void *p;

	if (vm) {
		vm->seen = true;
		return vm;
	}
	p = realloc(m->vms, (m->nvms + 1) * sizeof(*m->vms));
	if (!p)
		return NULL;
	m->vms = p;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->uid = uid;
	vm->vm = index;
	vm->stats.index = -1;
	vm->sum.index = -1;
	vm->seen = true;
	m->vms[m->nvms++] = vm;
	return vm;
}

/* vCPUs stay sorted by index: columns of the vCPU view, in order. */
struct top_series *model_vcpu(struct top_vm *vm, int index)
{
	size_t at = 0;
	void *p;

	while (at < vm->nvcpus && vm->vcpus[at].index < index)
		at++;
	if (at < vm->nvcpus && vm->vcpus[at].index == index)
		return &vm->vcpus[at];
	p = realloc(vm->vcpus, (vm->nvcpus + 1) * sizeof(*vm->vcpus));
	if (!p)
		return NULL;
	vm->vcpus = p;
	memmove(&vm->vcpus[at + 1], &vm->vcpus[at],
		(vm->nvcpus - at) * sizeof(*vm->vcpus));
	memset(&vm->vcpus[at], 0, sizeof(*vm->vcpus));
	vm->vcpus[at].index = index;
	vm->nvcpus++;
	return &vm->vcpus[at];
}

/* u64 words of a bitmap of one bit per stat of @schema (at least one). */
static size_t map_words(const struct kvmstats_schema *schema)
{
	size_t n = (kvmstats_schema__num_stats(schema) + 63) / 64;

	return n ? n : 1;
}

static bool bit(const uint64_t *map, uint32_t i)
{
	return (map[i / 64] >> (i % 64)) & 1;
}

/* Are all the counters of @s's schema unknown (and is there one)? */
static bool all_counters_missing(const struct top_series *s)
{
	const struct kvmstats_stat *st;
	bool any = false;

	kvmstats_schema__for_each (st, s->schema) {
		if (kvmstats_stat__type(st) != KVMSTATS_TYPE_CUMULATIVE)
			continue;
		if (!bit(s->missing, kvmstats_stat__index(st)))
			return false;
		any = true;
	}
	return any;
}

void series_missing(struct top_series *s, const uint64_t *missing)
{
	if (!s->schema)
		return;
	if (missing)
		memcpy(s->missing, missing, map_words(s->schema) * 8);
	else
		memset(s->missing, 0, map_words(s->schema) * 8);
	if (s->base_pending)
		memcpy(s->base_missing, s->missing, map_words(s->schema) * 8);
	s->base_pending = false;
	s->all_missing = missing && all_counters_missing(s);
}

bool series_known(const struct top_series *s, const struct kvmstats_stat *st)
{
	return s->schema && !bit(s->missing, kvmstats_stat__index(st));
}

/* Known at the latest reading and at the previous one (@base: at the
 * baseline): a delta of two readings. */
static bool known_since(const struct top_series *s,
			const struct kvmstats_stat *st, bool base)
{
	return series_known(s, st) &&
	       !bit(base ? s->base_missing : s->prev_missing,
		    kvmstats_stat__index(st));
}

/* Give @s buffers for @schema (a target behind the same key may come
 * back with another schema: start it over). */
static int series_bind(struct top_series *s, struct kvmstats_schema *schema)
{
	size_t sz = kvmstats_schema__data_size(schema);

	if (s->schema == schema)
		return 0;
	series_free(s);
	s->cur = calloc(1, sz ? sz : 8);
	s->prev = calloc(1, sz ? sz : 8);
	s->base = calloc(1, sz ? sz : 8);
	s->missing = calloc(map_words(schema), 8);
	s->prev_missing = calloc(map_words(schema), 8);
	s->base_missing = calloc(map_words(schema), 8);
	if (!s->cur || !s->prev || !s->base || !s->missing ||
	    !s->prev_missing || !s->base_missing) {
		series_free(s);
		return -ENOMEM;
	}
	s->schema = kvmstats_schema__get(schema);
	return 0;
}

int series_feed(struct top_model *m, struct top_series *s,
		struct kvmstats_schema *schema, const void *data,
		uint64_t time_ns, bool restart)
{
	size_t sz = kvmstats_schema__data_size(schema);
	uint64_t *t;
	int err = series_bind(s, schema);

	if (err)
		return err;
	if (restart)
		s->n = 0;
	s->fresh = true;
	if (!s->n) {
		memcpy(s->cur, data, sz);
		memcpy(s->prev, data, sz);
		memset(s->base_missing, 0, map_words(schema) * 8);
		if (m->include_past)
			memset(s->base, 0, sz);
		else
			memcpy(s->base, data, sz);
		s->base_pending = !m->include_past;
		s->t_cur = s->t_prev = s->t_base = time_ns;
		s->n = 1;
		return 0;
	}
	/* (series_missing() gives this reading's next) */
	memcpy(s->prev_missing, s->missing, map_words(schema) * 8);
	t = s->prev;
	s->prev = s->cur;
	s->cur = t;
	memcpy(s->cur, data, sz);
	s->t_prev = s->t_cur;
	s->t_cur = time_ns;
	if (s->n < 2)
		s->n++;
	return 0;
}

/* Which words of a data block are peaks (the sum takes their maximum),
 * worked out once per schema: the fold is on the path of every frame. */
static int peak_map(struct top_vm *vm)
{
	const struct kvmstats_stat *st;
	size_t words = kvmstats_schema__data_size(vm->sum.schema) / 8;

	free(vm->peak);
	vm->peak = calloc(words ? words : 1, sizeof(*vm->peak));
	if (!vm->peak)
		return -ENOMEM;
	kvmstats_schema__for_each (st, vm->sum.schema) {
		size_t w = kvmstats_stat__offset(st) / 8;

		for (uint32_t i = 0;
		     i < kvmstats_stat__size(st) && w + i < words; i++)
			vm->peak[w + i] =
				kvmstats_stat__type(st) == KVMSTATS_TYPE_PEAK;
	}
	return 0;
}

/* Fold one vCPU block into the sum: peaks take the maximum, everything
 * else (counters, levels, booleans as a count of "yes", histogram
 * buckets) adds up. */
static void fold(const bool *peak, size_t words, uint64_t *acc,
		 const uint64_t *v)
{
	for (size_t i = 0; i < words; i++) {
		if (peak[i])
			acc[i] = v[i] > acc[i] ? v[i] : acc[i];
		else
			acc[i] += v[i];
	}
}

static size_t fold_base(struct top_vm *vm, size_t words)
{
	struct top_series *s = &vm->sum;
	size_t n = 0;

	memset(s->base, 0, words * 8);
	for (size_t i = 0; i < vm->nvcpus; i++) {
		if (vm->vcpus[i].schema != s->schema)
			continue;
		fold(vm->peak, words, s->base, vm->vcpus[i].base);
		n++;
	}
	return n;
}

/*
 * The sum of this frame. When the same vCPUs were summed last frame and
 * none of them started over, last frame's sum is this frame's previous
 * one, and the baseline has not moved: one fold per vCPU instead of three
 * (this runs for every VM at every frame).
 */
static void vm_sum(struct top_vm *vm)
{
	struct top_series *s = &vm->sum, *first = NULL;
	size_t words, members = 0;
	bool reuse = s->n > 0, restarted = false;
	uint64_t *t;

	for (size_t i = 0; i < vm->nvcpus && !first; i++)
		if (vm->vcpus[i].schema)
			first = &vm->vcpus[i];
	if (!first)
		return;
	if (s->schema != first->schema) {
		reuse = false;
		if (series_bind(s, first->schema) || peak_map(vm)) {
			series_free(s);
			vm->nsum = 0;
			return;
		}
	}
	words = kvmstats_schema__data_size(s->schema) / 8;
	for (size_t i = 0; i < vm->nvcpus; i++) {
		if (vm->vcpus[i].schema != s->schema)
			continue;
		members++;
		restarted |= vm->vcpus[i].n < 2;
	}
	reuse &= members == vm->nsum && !restarted;
	t = s->prev;
	s->prev = s->cur;
	s->cur = t;
	memset(s->cur, 0, words * 8);
	if (!reuse)
		memset(s->prev, 0, words * 8);
	for (size_t i = 0; i < vm->nvcpus; i++) {
		struct top_series *c = &vm->vcpus[i];

		if (c->schema != s->schema)
			continue;
		fold(vm->peak, words, s->cur, c->cur);
		/* A vCPU not read this time, or read once, adds nothing to
		 * the interval. */
		if (!reuse)
			fold(vm->peak, words, s->prev,
			     c->fresh && c->n >= 2 ? c->prev : c->cur);
	}
	if (!reuse)
		fold_base(vm, words);
	/* A stat unknown for one vCPU is unknown in the sum; so at the
	 * previous sum (last frame's, or each vCPU's reading it took) and
	 * at the baseline. */
	if (reuse)
		memcpy(s->prev_missing, s->missing, map_words(s->schema) * 8);
	else
		memset(s->prev_missing, 0, map_words(s->schema) * 8);
	memset(s->missing, 0, map_words(s->schema) * 8);
	memset(s->base_missing, 0, map_words(s->schema) * 8);
	for (size_t i = 0; i < vm->nvcpus; i++) {
		const struct top_series *c = &vm->vcpus[i];

		if (c->schema != s->schema)
			continue;
		for (size_t w = 0; w < map_words(s->schema); w++) {
			s->missing[w] |= c->missing[w];
			s->base_missing[w] |= c->base_missing[w];
			if (!reuse)
				s->prev_missing[w] |=
					c->fresh && c->n >= 2
						? c->prev_missing[w]
						: c->missing[w];
		}
	}
	s->all_missing = all_counters_missing(s);
	vm->nsum = members;
	s->t_cur = first->t_cur;
	s->t_prev = first->t_prev;
	s->t_base = first->t_base;
	s->n = first->n;
	s->fresh = true;
}

void model_end(struct top_model *m, uint64_t time_ns)
{
	size_t j = 0;

	for (size_t i = 0; i < m->nvms; i++) {
		if (!m->vms[i]->seen) {
			vm_free(m->vms[i]);
			continue;
		}
		m->vms[j++] = m->vms[i];
	}
	m->nvms = j;
	for (size_t i = 0; i < m->nvms; i++) {
		struct top_vm *vm = m->vms[i];

		vm->multi = false;
		for (size_t k = 0; k < m->nvms; k++)
			if (k != i && m->vms[k]->uid == vm->uid)
				vm->multi = true;
		vm_sum(vm);
	}
	m->cols = model_cols(m);
	m->t_prev = m->frames ? m->t_cur : time_ns;
	m->t_cur = time_ns;
	m->frames++;
}

static void series_reset(struct top_series *s)
{
	if (!s->schema)
		return;
	memcpy(s->base, s->cur, kvmstats_schema__data_size(s->schema));
	memcpy(s->base_missing, s->missing, map_words(s->schema) * 8);
	s->t_base = s->t_cur;
}

void model_reset(struct top_model *m)
{
	for (size_t i = 0; i < m->nvms; i++) {
		struct top_vm *vm = m->vms[i];

		series_reset(&vm->stats);
		for (size_t k = 0; k < vm->nvcpus; k++)
			series_reset(&vm->vcpus[k]);
		/* Not vm_sum(): this frame's sum and its previous stay. */
		if (vm->sum.schema) {
			fold_base(vm,
				  kvmstats_schema__data_size(vm->sum.schema) /
					  8);
			memcpy(vm->sum.base_missing, vm->sum.missing,
			       map_words(vm->sum.schema) * 8);
			vm->sum.t_base = vm->sum.t_cur;
		}
	}
}

/* ---- delta ---------------------------------------------------------- */

double series_interval_s(const struct top_series *s)
{
	if (s->n < 2 || s->t_cur <= s->t_prev)
		return NAN;
	return (double)(s->t_cur - s->t_prev) / 1e9;
}

double series_rate(const struct top_series *s, const struct kvmstats_stat *st)
{
	if (!known_since(s, st, false) || s->n < 2 || s->t_cur <= s->t_prev)
		return NAN;
	return kvmstats_stat__rate(st, s->prev, s->cur, s->t_cur - s->t_prev);
}

double series_total(const struct top_series *s, const struct kvmstats_stat *st)
{
	const uint64_t *c, *b;

	if (!series_known(s, st))
		return NAN;
	/* A level is the latest reading's; an increase needs the baseline's. */
	if ((stat_is_hist(st) ||
	     kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE) &&
	    !known_since(s, st, true))
		return NAN;
	c = kvmstats_stat__values(st, s->cur);
	b = kvmstats_stat__values(st, s->base);
	if (stat_is_hist(st)) {
		uint64_t n = kvmstats_hist__count(st, c),
			 nb = kvmstats_hist__count(st, b);

		return (double)(n >= nb ? n - nb : n);
	}
	if (kvmstats_stat__type(st) != KVMSTATS_TYPE_CUMULATIVE)
		return (double)c[0];
	/* A counter that went back (a new VM behind the key) counts anew. */
	return (double)(c[0] >= b[0] ? c[0] - b[0] : c[0]);
}

bool series_hist(const struct top_series *s, const struct kvmstats_stat *st,
		 uint64_t *out)
{
	if (!known_since(s, st, false) || s->n < 2)
		return false;
	kvmstats_hist__delta(st, s->prev, s->cur, out);
	return true;
}

double vm_rate(const struct top_vm *vm, const char *stat)
{
	const struct kvmstats_stat *st;

	if (vm->sum.schema) {
		st = kvmstats_schema__find(vm->sum.schema, stat);
		if (st)
			return series_rate(&vm->sum, st);
	}
	if (vm->stats.schema) {
		st = kvmstats_schema__find(vm->stats.schema, stat);
		if (st)
			return series_rate(&vm->stats, st);
	}
	return NAN;
}

static bool is_count(const struct kvmstats_stat *st)
{
	return kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE &&
	       kvmstats_stat__unit(st) == KVMSTATS_UNIT_NONE &&
	       kvmstats_stat__size(st) == 1;
}

double series_share(const struct top_series *s, const struct kvmstats_stat *st)
{
	const struct kvmstats_stat *o;
	double all = 0;

	if (!series_known(s, st) || !is_count(st))
		return NAN;
	kvmstats_schema__for_each (o, s->schema)
		if (is_count(o))
			all += series_total(s, o);
	return all > 0 ? series_total(s, st) * 100 / all : NAN;
}

/* ---- formatting of cells ------------------------------------------- */

void fmt_count(double v, char *buf, size_t len)
{
	static const char sfx[] = " kMGTPE";
	double a = fabs(v);
	int i = 0;

	if (isnan(v)) {
		snprintf(buf, len, "-");
		return;
	}
	if (a < 1000) {
		if (v == floor(v) || a >= 99.95)
			snprintf(buf, len, "%.0f", v);
		else
			snprintf(buf, len, a < 9.995 ? "%.2f" : "%.1f", v);
		return;
	}
	while (a >= 999.5 && i < 6) {
		a /= 1000;
		v /= 1000;
		i++;
	}
	snprintf(buf, len, "%.3g%c", v, sfx[i]);
}

void fmt_rate(const struct kvmstats_stat *st, double rate, char *buf,
	      size_t len)
{
	size_t used;

	if (isnan(rate)) {
		snprintf(buf, len, "-");
		return;
	}
	if (kvmstats_stat__unit(st) == KVMSTATS_UNIT_NONE) {
		fmt_count(kvmstats_stat__scale(st, rate), buf, len);
		return;
	}
	kvmstats_stat__format(st, rate, buf, len);
	used = strlen(buf);
	snprintf(buf + used, len - used, "/s");
}

void fmt_level(const struct kvmstats_stat *st, double v, unsigned int nvals,
	       char *buf, size_t len)
{
	if (isnan(v)) {
		snprintf(buf, len, "-");
		return;
	}
	if (!kvmstats_stat__known(st)) {
		snprintf(buf, len, "%.0f", v);
		return;
	}
	if (kvmstats_stat__unit(st) == KVMSTATS_UNIT_BOOLEAN && nvals > 1) {
		snprintf(buf, len, "%.0f/%u", v, nvals);
		return;
	}
	if (kvmstats_stat__unit(st) == KVMSTATS_UNIT_NONE)
		fmt_count(kvmstats_stat__scale(st, v), buf, len);
	else
		kvmstats_stat__format(st, v, buf, len);
}

void fmt_quantile(const struct kvmstats_stat *st, const uint64_t *h, double q,
		  char *buf, size_t len)
{
	double x = h ? kvmstats_hist__quantile(st, h, q) : NAN;

	if (isnan(x))
		snprintf(buf, len, "-");
	else
		kvmstats_stat__format(st, x, buf, len);
}

bool stat_shown(const struct top_opts *o, const regex_t *filter,
		const struct top_series *s, const struct kvmstats_stat *st)
{
	const char *name = kvmstats_stat__name(st);
	const uint64_t *v;
	double rate;

	if (o->fields_set && regexec(&o->fields, name, 0, NULL, 0))
		return false;
	if (filter && regexec(filter, name, 0, NULL, 0))
		return false;
	if (!o->skip_zero)
		return true;
	/* kvm_stat -z: hide what is zero in every column. */
	if (stat_is_hist(st) ||
	    kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE) {
		rate = series_rate(s, st);
		return series_total(s, st) != 0 || (!isnan(rate) && rate != 0);
	}
	v = kvmstats_stat__values(st, s->cur);
	for (uint32_t i = 0; i < kvmstats_stat__size(st); i++)
		if (v[i])
			return true;
	return false;
}

/* ---- the VM list's columns ------------------------------------------ */

/* The counters kvm_stat users look at first, x86's then arm64's: the
 * list shows those the VMs on screen have (col_on()); the ones this
 * host's KVM does not maintain simply read 0. */
const struct top_col top_cols[] = {
	{"PID", 7, COL_PID, NULL, 0},
	{"VM", 16, COL_NAME, NULL, 0},
	{"SOURCE", 7, COL_SOURCE, NULL, 3},
	{"VCPUS", 5, COL_VCPUS, NULL, 2},
	{"EXITS/s", 9, COL_RATE, "exits", 0, true},
	{"HALT/s", 8, COL_RATE, "halt_exits", 1, true},
	{"EMUL/s", 8, COL_RATE, "insn_emulation", 4, true},
	{"IO/s", 8, COL_RATE, "io_exits", 5, true},
	{"MMIO/s", 8, COL_RATE, "mmio_exits", 7, true},
	{"IRQ/s", 8, COL_RATE, "irq_exits", 6, true},
	{"PF/s", 8, COL_RATE, "pf_taken", 8, true},
	{"HVC/s", 8, COL_RATE, "hvc_exit_stat", 1},
	{"WFI/s", 8, COL_RATE, "wfi_exit_stat", 4},
	{"WFE/s", 8, COL_RATE, "wfe_exit_stat", 6},
	{"MMIOU/s", 8, COL_RATE, "mmio_exit_user", 5},
	{"MMIOK/s", 8, COL_RATE, "mmio_exit_kernel", 7},
	{"WAKE/s", 8, COL_RATE, "halt_wakeup", 9, true},
};
const size_t top_ncols = sizeof(top_cols) / sizeof(top_cols[0]);

static bool vm_has(const struct top_vm *vm, const char *stat)
{
	return (vm->sum.schema && kvmstats_schema__find(vm->sum.schema, stat)) ||
	       (vm->stats.schema && kvmstats_schema__find(vm->stats.schema, stat));
}

/* The columns of the VMs in the model: those that are not rates, and
 * each rate some VM has. With no VM yet, x86's (what most hosts run).
 * VMs share their schemas (one per kernel and source): each pair of
 * schemas is looked at once in a row, and the walk ends once every
 * column is on. */
static uint32_t model_cols(const struct top_model *m)
{
	const struct kvmstats_schema *sum = NULL, *stats = NULL;
	uint32_t cols = 0, all = 0;

	_Static_assert(sizeof(top_cols) / sizeof(top_cols[0]) <= 32,
		       "a bit per column");
	for (size_t c = 0; c < top_ncols; c++) {
		all |= 1u << c;
		if (top_cols[c].kind != COL_RATE || (!m->nvms && top_cols[c].x86))
			cols |= 1u << c;
	}
	for (size_t i = 0; i < m->nvms && cols != all; i++) {
		const struct top_vm *vm = m->vms[i];

		if (i && vm->sum.schema == sum && vm->stats.schema == stats)
			continue;
		sum = vm->sum.schema;
		stats = vm->stats.schema;
		for (size_t c = 0; c < top_ncols; c++)
			if (!(cols & (1u << c)) && vm_has(vm, top_cols[c].stat))
				cols |= 1u << c;
	}
	return cols;
}

size_t col_next(const struct top_model *m, size_t c, int step)
{
	for (size_t i = 0; i < top_ncols; i++) {
		c = (c + top_ncols + (size_t)step) % top_ncols;
		if (col_on(m, c))
			return c;
	}
	return 0;
}

const char *vm_label(const struct top_vm *vm, char *buf, size_t len)
{
	const char *name = vm->name[0] ? safe_str(vm->name) : "?";

	if (vm->multi)
		snprintf(buf, len, "%s#%d", name, vm->vm);
	else
		snprintf(buf, len, "%s", name);
	return buf;
}

const char *vm_unknown(const struct top_vm *vm)
{
	bool any = vm->stats.schema || vm->sum.schema;

	if (!any || (vm->stats.schema && !vm->stats.all_missing) ||
	    (vm->sum.schema && !vm->sum.all_missing))
		return NULL;
	return unknown_reason(vm->source);
}

void col_cell(const struct top_col *c, const struct top_vm *vm, char *buf,
	      size_t len)
{
	switch (c->kind) {
	case COL_PID:
		snprintf(buf, len, "%d", (int)vm->pid);
		return;
	case COL_NAME:
		vm_label(vm, buf, len);
		return;
	case COL_SOURCE:
		snprintf(buf, len, "%s", vm->source);
		return;
	case COL_VCPUS:
		snprintf(buf, len, "%zu", vm->nvcpus);
		return;
	case COL_RATE:
		if (vm_unknown(vm))
			snprintf(buf, len, "n/a");
		else
			fmt_count(vm_rate(vm, c->stat), buf, len);
		return;
	}
}

struct sort_key {
	const struct top_col *col;
	bool asc;
};

static double col_num(const struct top_col *c, const struct top_vm *vm)
{
	double v;

	switch (c->kind) {
	case COL_PID:
		return vm->pid;
	case COL_VCPUS:
		return (double)vm->nvcpus;
	case COL_RATE:
		v = vm_rate(vm, c->stat);
		return isnan(v) ? -1 : v;
	default:
		return 0;
	}
}

static int cmp_vm(const void *a, const void *b, void *arg)
{
	const struct top_vm *x = *(struct top_vm *const *)a;
	const struct top_vm *y = *(struct top_vm *const *)b;
	const struct sort_key *k = arg;
	int r;

	if (k->col->kind == COL_NAME || k->col->kind == COL_SOURCE) {
		r = k->col->kind == COL_NAME ? strcmp(x->name, y->name)
					     : strcmp(x->source, y->source);
		r = -r; /* names read best A to Z by default */
	} else {
		double u = col_num(k->col, x), v = col_num(k->col, y);

		r = (u > v) - (u < v);
	}
	if (k->asc)
		r = -r;
	if (r)
		return -r;
	/* Ties keep a stable order, so rows do not jump around. */
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return (x->vm > y->vm) - (x->vm < y->vm);
}

void model_sort(struct top_model *m, size_t col, bool asc)
{
	struct sort_key k = {&top_cols[col < top_ncols ? col : 0], asc};

	if (m->nvms > 1)
		qsort_r(m->vms, m->nvms, sizeof(*m->vms), cmp_vm, &k);
}
