// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats record --log: a vmstat-like text log, as kvm_stat -l/-L
 * prints. A line sums one stat over every chosen VM and vCPU: the rate
 * of a cumulative stat over the last interval (or its total with
 * --include-past), the level of an instant one, the largest peak. The
 * columns are chosen once, from the schemas of the first VMs seen; a
 * stat no target could read this time is "-" (null, an empty field),
 * never 0. The readings are those of record.c's sweep.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "record_text.h"
#include "sanitize.h"

#define HEADER_EVERY 20		/* text lines between two header lines */

/* One column: a stat name, summed over the targets. */
struct text_col {
	char *name;
	unsigned int type;	/* of the first schema that has it */
	double value;
	bool any;		/* some target had it this line */
};

/* A reader's reading as the last line saw it (a copy: QMP's and
 * libvirt's readers are read again between two lines, see
 * target_settle()), and what it did not know: the stats whose word there
 * is no reading. */
struct text_seen {
	const struct kvmstats_reader *r;
	uint64_t uid;		/* its VMM's (a freed reader's address is reused) */
	uint64_t time_ns;
	uint64_t *data;		/* the reading's data block, then missing */
	size_t cap;		/* bytes at data: kept from line to line */
	uint64_t *missing;	/* NULL: it knew every stat */
};

/* Which stat of a schema each column is (NULL: the schema lacks it). */
struct text_colmap {
	const struct kvmstats_schema *s;
	const struct kvmstats_stat **st;
};

static struct text_col *find_col(struct text_log *t, const char *name)
{
	for (size_t i = 0; i < t->ncols; i++)
		if (!strcmp(t->cols[i].name, name))
			return &t->cols[i];
	return NULL;
}

static int add_schema_cols(struct text_log *t, const struct kvmstats_schema *s)
{
	const struct kvmstats_stat *st;

	kvmstats_schema__for_each(st, s) {
		const char *name = kvmstats_stat__name(st);
		void *p;

		if (stat_is_hist(st) || find_col(t, name))
			continue;
		if (t->fields_set && regexec(&t->fields, name, 0, NULL, 0))
			continue;
		p = realloc(t->cols, (t->ncols + 1) * sizeof(*t->cols));
		if (!p)
			return -ENOMEM;
		t->cols = p;
		t->cols[t->ncols] = (struct text_col){ .name = strdup(name),
						     .type = kvmstats_stat__type(st) };
		if (!t->cols[t->ncols].name)
			return -ENOMEM;
		t->ncols++;
	}
	return 0;
}

static const struct kvmstats_stat **colmap(struct text_log *t,
					   const struct kvmstats_schema *s)
{
	const struct kvmstats_stat **st;
	void *p;

	for (size_t i = 0; i < t->nmaps; i++)
		if (t->maps[i].s == s)
			return t->maps[i].st;
	/* Keep the grown array even if calloc fails: the old one is gone. */
	p = realloc(t->maps, (t->nmaps + 1) * sizeof(*t->maps));
	if (!p)
		return NULL;
	t->maps = p;
	st = calloc(t->ncols + 1, sizeof(*st));
	if (!st)
		return NULL;
	for (size_t c = 0; c < t->ncols; c++) {
		st[c] = kvmstats_schema__find(s, t->cols[c].name);
		if (st[c] && stat_is_hist(st[c]))
			st[c] = NULL;
	}
	t->maps[t->nmaps++] = (struct text_colmap){ s, st };
	return st;
}

static bool bit_set(const uint64_t *map, uint32_t i)
{
	return map && (map[i / 64] >> (i % 64)) & 1;
}

/* What the last line saw of @rd of VMM @uid: found at its place in the
 * visiting order, else searched for. */
static const struct text_seen *seen_of(const struct text_log *t,
				       const struct kvmstats_reader *rd, uint64_t uid)
{
	size_t at = t->nseen_next;

	if (at < t->nseen && t->seen[at].r == rd && t->seen[at].uid == uid)
		return &t->seen[at];
	for (size_t i = 0; i < t->nseen; i++)
		if (t->seen[i].r == rd && t->seen[i].uid == uid)
			return &t->seen[i];
	return NULL;
}

/* Twice the room for readings in both lines' arrays (swapped line by
 * line, so of one size), the new entries without a buffer. */
static int seen_grow(struct text_log *t)
{
	size_t cap = t->seen_cap ? 2 * t->seen_cap : 64;
	struct text_seen *p;

	p = realloc(t->seen_next, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	memset(p + t->seen_cap, 0, (cap - t->seen_cap) * sizeof(*p));
	t->seen_next = p;
	p = realloc(t->seen, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	memset(p + t->seen_cap, 0, (cap - t->seen_cap) * sizeof(*p));
	t->seen = p;
	t->seen_cap = cap;
	return 0;
}

/* Keep a copy of @rd's reading @data (taken at @time_ns) and what it did
 * not know for the next line, in a buffer an earlier line left there
 * where it is large enough (no allocation once the VMs are known); false
 * when out of memory (the next line then has no rate of it). */
static bool seen_add(struct text_log *t, const struct kvmstats_reader *rd,
		     uint64_t uid, const uint64_t *data, uint64_t time_ns,
		     const uint64_t *miss)
{
	const struct kvmstats_schema *s = kvmstats_reader__schema(rd);
	size_t words = (kvmstats_schema__num_stats(s) + 63) / 64;
	size_t size = kvmstats_schema__data_size(s);
	size_t need = size + words * 8 + 8;
	struct text_seen *e;

	if (t->nseen_next == t->seen_cap && seen_grow(t))
		return false;
	e = &t->seen_next[t->nseen_next];
	if (e->cap < need) {
		void *p = realloc(e->data, need);

		if (!p)
			return false;
		e->data = p;
		e->cap = need;
	}
	e->r = rd;
	e->uid = uid;
	e->time_ns = time_ns;
	e->missing = NULL;
	memcpy(e->data, data, size);
	if (miss) {
		e->missing = e->data + size / 8;
		memcpy(e->missing, miss, words * 8);
	}
	t->nseen_next++;
	return true;
}

/* The line's readings become the last line's; the last line's buffers
 * are the next line's to fill. */
static void seen_swap(struct text_log *t)
{
	struct text_seen *p = t->seen;

	t->seen = t->seen_next;
	t->nseen = t->nseen_next;
	t->seen_next = p;
	t->nseen_next = 0;
}

/* Add one reader's contribution (of VMM @uid): rates of cumulative
 * stats (or totals with --include-past), levels of instant ones, maxima
 * of peaks. */
static void add_reader(struct text_log *t, struct kvmstats_reader *rd, uint64_t uid,
		       bool totals)
{
	const struct kvmstats_sample *cur = kvmstats_reader__cur(rd);
	const uint64_t *miss = kvmstats_reader__missing(rd);
	const struct text_seen *seen = seen_of(t, rd, uid);
	/* The reading the last line saw, for rates: its own allocation,
	 * which seen_add() moving the array leaves where it is. */
	const uint64_t *was = seen ? seen->data : NULL;
	const uint64_t *was_miss = seen ? seen->missing : NULL;
	uint64_t was_ns = seen ? seen->time_ns : 0;
	const struct kvmstats_stat **st;

	/* A failed read keeps the last good reading, and the next line's
	 * rate spans both intervals: keep what the last line saw. */
	if (was && kvmstats_reader__error(rd))
		seen_add(t, rd, uid, was, was_ns, was_miss);
	if (!cur || kvmstats_reader__error(rd))
		return;
	if (!seen_add(t, rd, uid, cur->data, cur->time_ns, miss))
		return;
	st = colmap(t, kvmstats_reader__schema(rd));
	if (!st)
		return;
	for (size_t c = 0; c < t->ncols; c++) {
		struct text_col *col = &t->cols[c];
		double v;

		/* A stat the source refused stays missing ("-", null, an
		 * empty CSV field) unless another target knows it. */
		if (!st[c] || (miss && (miss[kvmstats_stat__index(st[c]) / 64] >>
					(kvmstats_stat__index(st[c]) % 64)) & 1))
			continue;
		v = (double)kvmstats_stat__values(st[c], cur->data)[0];
		if (kvmstats_stat__type(st[c]) == KVMSTATS_TYPE_CUMULATIVE && !totals) {
			/* Against the last line's reading; not where that
			 * did not know it (its 0 there is none). */
			if (!was || cur->time_ns <= was_ns ||
			    bit_set(was_miss, kvmstats_stat__index(st[c])))
				continue;
			v = kvmstats_stat__rate(st[c], was, cur->data,
						cur->time_ns - was_ns);
			if (isnan(v))
				continue;
		}
		if (kvmstats_stat__type(st[c]) == KVMSTATS_TYPE_PEAK)
			col->value = col->any && col->value > v ? col->value : v;
		else
			col->value += v;
		col->any = true;
	}
}

static void sum_columns(struct text_log *t, struct kvmstats_vmm *const *sel,
			size_t nsel, bool totals)
{
	for (size_t c = 0; c < t->ncols; c++) {
		t->cols[c].value = 0;
		t->cols[c].any = false;
	}
	/* (a second pass over the same readings sees what the first kept) */
	t->nseen_next = 0;
	for (size_t i = 0; i < nsel; i++) {
		struct kvmstats_vmm *v = sel[i];

		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int index;

			if (kvmstats_vm__reader(vm))
				add_reader(t, kvmstats_vm__reader(vm), kvmstats_vmm__uid(v),
					   totals);
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
				add_reader(t, kvmstats_vm__vcpu(vm, k, &index),
					   kvmstats_vmm__uid(v), totals);
		}
	}
}

/* Columns are chosen once, when the first targets are seen: every stat of
 * their schemas that --fields matches (histograms aside), less with
 * --skip-zero those never counted so far (stats this KVM does not keep). */
static int choose_columns(struct text_log *t, struct kvmstats_vmm *const *sel,
			  size_t nsel)
{
	size_t keep = 0;

	for (size_t i = 0; i < nsel; i++) {
		struct kvmstats_vmm *v = sel[i];

		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int index;

			if (kvmstats_vm__reader(vm) &&
			    add_schema_cols(t, kvmstats_reader__schema(kvmstats_vm__reader(vm))))
				return -ENOMEM;
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++)
				if (add_schema_cols(t, kvmstats_reader__schema(
							       kvmstats_vm__vcpu(vm, k, &index))))
					return -ENOMEM;
		}
	}
	if (!t->ncols)
		return 0;
	if (t->skip_zero) {
		sum_columns(t, sel, nsel, true);
		for (size_t c = 0; c < t->ncols; c++) {
			if (t->cols[c].value != 0)
				t->cols[keep++] = t->cols[c];
			else
				free(t->cols[c].name);
		}
		t->ncols = keep;
		/* The maps index the columns as they were. */
		for (size_t i = 0; i < t->nmaps; i++)
			free(t->maps[i].st);
		t->nmaps = 0;
	}
	t->cols_ready = true;
	return 0;
}

static int col_width(const struct text_col *c)
{
	int n = (int)strlen(safe_str(c->name));

	return n > 9 ? n : 9;
}

static void print_header(struct text_log *t)
{
	FILE *f = t->out;

	if (t->cli->format == OUT_CSV) {
		struct csv c = { .f = f };

		csv_field(&c, "time");
		for (size_t i = 0; i < t->ncols; i++)
			csv_field(&c, t->cols[i].name);
		csv_end(&c);
		return;
	}
	fprintf(f, "%-8s", "time");
	for (size_t c = 0; c < t->ncols; c++)
		fprintf(f, " %*s", col_width(&t->cols[c]), safe_str(t->cols[c].name));
	fputc('\n', f);
}

static void print_line(struct text_log *t, uint64_t rt_ns)
{
	time_t secs = (time_t)(rt_ns / 1000000000ull);
	struct tm tm;
	char ts[40];
	FILE *f = t->out;

	localtime_r(&secs, &tm);
	if (t->cli->format == OUT_JSON) {
		struct json_object *o = json_object_new_object();
		struct json_object *v = json_object_new_object(), *clean;

		json_object_object_add(o, "time", cli_json_double(rt_ns / 1e9));
		for (size_t c = 0; c < t->ncols; c++)
			json_object_object_add(v, t->cols[c].name,
					       t->cols[c].any ? cli_json_double(
									t->cols[c].value)
							      : NULL);
		clean = json_clean(v);
		if (clean != v)
			json_object_put(v);
		json_object_object_add(o, t->past ? "totals" : "rates", clean);
		fprintf(f, "%s\n", json_object_to_json_string_ext(
					   o, JSON_C_TO_STRING_PLAIN |
						      JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		return;
	}
	if (t->cli->format == OUT_CSV) {
		struct csv c = { .f = f };

		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S%z", &tm);
		csv_field(&c, ts);
		for (size_t i = 0; i < t->ncols; i++) {
			if (t->cols[i].any)
				csv_double(&c, t->cols[i].value, t->past ? 0 : 2);
			else
				csv_empty(&c);
		}
		csv_end(&c);
		return;
	}
	strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
	fprintf(f, "%-8s", ts);
	for (size_t c = 0; c < t->ncols; c++) {
		if (t->cols[c].any)
			fprintf(f, " %*.0f", col_width(&t->cols[c]), t->cols[c].value);
		else
			fprintf(f, " %*s", col_width(&t->cols[c]), "-");
	}
	fputc('\n', f);
}

void text_log_line(struct text_log *t, struct kvmstats_vmm *const *sel,
		   size_t nsel, uint64_t rt_ns, unsigned long sample)
{
	bool nonzero = false;

	if (!t->cols_ready) {
		/* Once: the VMs whose every counter is unknown, and why. */
		for (size_t i = 0; i < nsel; i++)
			target_warn_unknown(t->cli, sel[i]);
		if (choose_columns(t, sel, nsel) || !t->cols_ready)
			return;
	}
	sum_columns(t, sel, nsel, t->past);
	seen_swap(t);
	/* Rates need two readings; totals are there from the first. */
	if (!t->past && sample == 0)
		return;
	for (size_t c = 0; c < t->ncols; c++)
		nonzero |= t->cols[c].any && t->cols[c].value != 0;
	if (t->skip_zero && !nonzero)
		return;
	if (t->cli->format == OUT_TABLE ? t->lines % HEADER_EVERY == 0
					: t->cli->format == OUT_CSV && t->lines == 0)
		print_header(t);
	print_line(t, rt_ns);
	t->lines++;
	fflush(t->out);
}

int text_log_open(struct text_log *t)
{
	FILE *f;

	if (!t->file) {
		t->out = stdout;
		return 0;
	}
	f = open_output(t->file, true);
	if (!f) {
		cli_err(t->cli, "%s: %s", t->file, errno == ELOOP ?
			"is a symbolic link: refusing to write through it" : strerror(errno));
		return -1;
	}
	if (t->out && t->out != stdout)
		fclose(t->out);
	t->out = f;
	return 0;
}

int text_log_fields(struct text_log *t, const char *re)
{
	return cli_parse_regex(t->cli, "--fields", re, &t->fields, &t->fields_set);
}

void text_log_free(struct text_log *t)
{
	for (size_t c = 0; c < t->ncols; c++)
		free(t->cols[c].name);
	for (size_t i = 0; i < t->nmaps; i++)
		free(t->maps[i].st);
	free(t->cols);
	free(t->maps);
	for (size_t i = 0; i < t->seen_cap; i++) {
		free(t->seen[i].data);
		free(t->seen_next[i].data);
	}
	free(t->seen);
	free(t->seen_next);
	if (t->fields_set)
		regfree(&t->fields);
	if (t->out && t->out != stdout)
		fclose(t->out);
}
