// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats replay: print a log written by `kvmstats record`.
 *
 *  - table (default): one line per sample, a column per stat summed over
 *    the VMs and vCPUs, as record --log prints it live;
 *  - --json: one object per sample, the shape of `dump --json` plus
 *    "time" (CLOCK_REALTIME seconds) and, with --rates, "interval" and a
 *    "rates" object next to each "stats";
 *  - --csv: one row per value, as `dump --csv` with time first.
 *
 * Damage in the log (a torn last record after kill -9, a record that
 * fails its CRC) is reported on stderr by the library and skipped; what
 * could be read is printed and the exit status is 0.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "sanitize.h"
#include "kvmstats_log.h"

enum {
	OPT_FROM = OPT_CMD_BASE,
	OPT_TO,
	OPT_RATES,
};

#define HEADER_EVERY 20

/* A time bound: absolute (epoch ns) or relative to the first sample. */
struct bound {
	bool set, relative;
	double sec;
};

/* The previous data of a target, for rates. */
struct prev {
	const struct kvmstats_log_target *t;
	uint64_t *data;
	uint64_t *missing;	/* the stats not known in data (their 0) */
	uint64_t time_ns;
	bool valid;
};

/* A column's sum over the chosen targets: a rate is a double, a raw
 * value is summed exactly (in 128 bits: u64 counters near 2^64 would
 * round in a double, and a sum of several can pass 2^64). */
struct column {
	char *name;
	double rate;
	unsigned __int128 raw;
	bool rated;		/* a rate: print rate, not raw */
	bool any, ever;		/* in this line; in any line */
};

struct replay {
	struct cli *cli;
	struct kvmstats_log_reader *log;
	const char *path;
	bool rates, skip_zero;
	struct bound from, to;
	uint64_t first_rt;
	bool have_first;
	pid_t *pids;
	size_t npids, pids_cap;
	regex_t name_re, fields;
	bool name_set, fields_set;

	struct prev *prevs;	/* open addressing on the target pointer */
	size_t nprev, cprev;
	uint64_t rt_ns, dt_ns;	/* current sample; its interval (rates) */

	struct column *cols;
	size_t ncols;
	bool counting;		/* first pass of --skip-zero */
	unsigned long lines;
};

/* ---- options -------------------------------------------------------- */

static int parse_bound(struct cli *cli, const char *opt, const char *arg,
		       struct bound *b)
{
	struct tm tm = { 0 };
	const char *end;
	char *e;

	b->set = true;
	b->relative = arg[0] == '+';
	errno = 0;
	b->sec = strtod(arg + b->relative, &e);
	if (!errno && e != arg + b->relative && !*e && b->sec >= 0)
		return 0;
	if (b->relative)
		goto bad;
	tm.tm_isdst = -1;
	end = strptime(arg, "%Y-%m-%d", &tm);
	if (end && (*end == 'T' || *end == ' ')) {
		const char *t = end + 1;

		end = strptime(t, "%H:%M:%S", &tm);
		if (!end)
			end = strptime(t, "%H:%M", &tm);
	}
	if (!end || *end)
		goto bad;
	b->sec = (double)mktime(&tm);
	return 0;
bad:
	cli_err(cli, "%s: what is '%s'? (seconds since the epoch, +SECONDS, or "
		"YYYY-MM-DDTHH:MM:SS)", opt, arg);
	return -1;
}

static bool in_bounds(struct replay *r, uint64_t rt_ns)
{
	double t = rt_ns / 1e9, first;

	if (!r->have_first) {
		r->first_rt = rt_ns;
		r->have_first = true;
	}
	first = r->first_rt / 1e9;
	if (r->from.set && t < (r->from.relative ? first + r->from.sec : r->from.sec))
		return false;
	if (r->to.set && t > (r->to.relative ? first + r->to.sec : r->to.sec))
		return false;
	return true;
}

static bool target_chosen(const struct replay *r, const struct kvmstats_log_target *t)
{
	bool pid_ok = !r->npids;

	for (size_t i = 0; i < r->npids; i++)
		pid_ok |= r->pids[i] == t->pid;
	return pid_ok && (!r->name_set || !regexec(&r->name_re, t->name, 0, NULL, 0));
}

/* ---- rates ---------------------------------------------------------- */

static size_t missing_words(const struct kvmstats_schema *s)
{
	size_t n = (kvmstats_schema__num_stats(s) + 63) / 64;

	return n ? n : 1;
}

static size_t prev_slot(const struct replay *r, const struct kvmstats_log_target *t)
{
	size_t i = ((uintptr_t)t >> 4) * 0x9e3779b97f4a7c15ull & (r->cprev - 1);

	while (r->prevs[i].t && r->prevs[i].t != t)
		i = (i + 1) & (r->cprev - 1);
	return i;
}

static int prev_grow(struct replay *r)
{
	struct prev *old = r->prevs;
	size_t oldn = r->cprev;

	r->cprev = oldn ? oldn * 2 : 256;
	r->prevs = calloc(r->cprev, sizeof(*r->prevs));
	if (!r->prevs) {
		r->prevs = old;
		r->cprev = oldn;
		return -ENOMEM;
	}
	for (size_t i = 0; i < oldn; i++)
		if (old[i].t)
			r->prevs[prev_slot(r, old[i].t)] = old[i];
	free(old);
	return 0;
}

static struct prev *prev_of(struct replay *r, const struct kvmstats_log_target *t)
{
	struct prev *p;
	size_t i;

	if ((r->nprev + 1) * 2 > r->cprev && prev_grow(r))
		return NULL;
	i = prev_slot(r, t);
	p = &r->prevs[i];
	if (!p->t) {
		p->data = malloc(kvmstats_schema__data_size(t->schema) + 8);
		p->missing = calloc(missing_words(t->schema), 8);
		if (!p->data || !p->missing) {
			free(p->data);
			free(p->missing);
			p->data = p->missing = NULL;
			return NULL;
		}
		p->t = t;
		r->nprev++;
	}
	return p;
}

/* The entry's previous data when it is good for a rate, else NULL. */
static const struct prev *rate_base(struct replay *r, const struct kvmstats_log_entry *e)
{
	struct prev *p = prev_of(r, e->target);

	if (!p || !p->valid || !e->data || p->time_ns >= kvmstats_log_reader__time_ns(r->log))
		return NULL;
	return p;
}

/* After printing a sample: its data become the previous ones. */
static void remember(struct replay *r)
{
	uint64_t now = kvmstats_log_reader__time_ns(r->log);

	for (size_t i = 0; i < kvmstats_log_reader__num_entries(r->log); i++) {
		const struct kvmstats_log_entry *e = kvmstats_log_reader__entry(r->log, i);
		struct prev *p;

		if (!e->data)
			continue;
		p = prev_of(r, e->target);
		if (!p)
			continue;
		memcpy(p->data, e->data, kvmstats_schema__data_size(e->schema));
		if (e->missing)
			memcpy(p->missing, e->missing, missing_words(e->schema) * 8);
		else
			memset(p->missing, 0, missing_words(e->schema) * 8);
		p->time_ns = now;
		p->valid = true;
	}
}

static void forget_all(struct replay *r)
{
	for (size_t i = 0; i < r->cprev; i++)
		r->prevs[i].valid = false;
}

static bool is_missing(const struct kvmstats_log_entry *e, const struct kvmstats_stat *st)
{
	uint32_t i = kvmstats_stat__index(st);

	return e->missing && (e->missing[i / 64] >> (i % 64)) & 1;
}

/* Not known at the previous sample: its 0 there is no reading, and a
 * rate over it would be the whole counter's. */
static bool prev_missing(const struct prev *p, const struct kvmstats_stat *st)
{
	uint32_t i = kvmstats_stat__index(st);

	return (p->missing[i / 64] >> (i % 64)) & 1;
}

/* ---- JSON ----------------------------------------------------------- */

static struct json_object *rates_json(struct replay *r, const struct kvmstats_log_entry *e)
{
	const struct prev *p = rate_base(r, e);
	struct json_object *o;
	const struct kvmstats_stat *st;

	if (!p)
		return NULL;
	o = json_object_new_object();
	kvmstats_schema__for_each(st, e->schema) {
		double v;

		if (kvmstats_stat__type(st) != KVMSTATS_TYPE_CUMULATIVE)
			continue;
		v = kvmstats_stat__rate(st, p->data, e->data,
					kvmstats_log_reader__time_ns(r->log) - p->time_ns);
		json_object_object_add(o, kvmstats_stat__name(st),
				       isnan(v) || is_missing(e, st) || prev_missing(p, st) ?
				       NULL : cli_json_double(v));
	}
	return o;
}

static void add_data(struct replay *r, struct json_object *o,
		     const struct kvmstats_log_entry *e)
{
	if (e->error) {
		json_object_object_add(o, "stats", json_object_new_object());
		json_object_object_add(o, "error",
				       json_object_new_string(strerror(-e->error)));
		return;
	}
	json_object_object_add(o, "stats", stats_json(e->schema, e->data, e->missing));
	if (r->rates) {
		struct json_object *rt = rates_json(r, e);

		if (rt)
			json_object_object_add(o, "rates", rt);
	}
}

static struct json_object *vm_new(const struct kvmstats_log_target *t)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "pid", json_object_new_int(t->pid));
	json_object_object_add(o, "name", json_object_new_string(t->name));
	json_object_object_add(o, "id", NULL);
	json_object_object_add(o, "source", json_object_new_string(t->source));
	json_object_object_add(o, "stats", json_object_new_object());
	json_object_object_add(o, "vcpus", json_object_new_array());
	return o;
}

/* The VM object of @t in @vms: the writer puts a VM's entry just before
 * its vCPUs', so the last one is nearly always it. */
static struct json_object *vm_of(struct json_object *vms,
				 const struct kvmstats_log_target **keys, size_t n,
				 const struct kvmstats_log_target *t)
{
	for (size_t i = n; i-- > 0;)
		if (keys[i]->uid == t->uid && keys[i]->pid == t->pid &&
		    keys[i]->vm == t->vm)
			return json_object_array_get_idx(vms, i);
	return NULL;
}

static int print_json_sample(struct replay *r)
{
	size_t n = kvmstats_log_reader__num_entries(r->log), nvm = 0;
	const struct kvmstats_log_target **keys = calloc(n + 1, sizeof(*keys));
	struct json_object *root, *vms;

	if (!keys)
		return -ENOMEM;
	root = json_object_new_object();
	vms = json_object_new_array();
	json_object_object_add(root, "time", cli_json_double(r->rt_ns / 1e9));
	for (size_t i = 0; i < n; i++) {
		const struct kvmstats_log_entry *e = kvmstats_log_reader__entry(r->log, i);
		const struct kvmstats_log_target *t = e->target;
		struct json_object *vm, *c;

		if (!target_chosen(r, t))
			continue;
		vm = vm_of(vms, keys, nvm, t);
		if (!vm) {
			vm = vm_new(t);
			json_object_array_add(vms, vm);
			keys[nvm++] = t;
		}
		if (t->vcpu < 0) {
			json_object_object_add(vm, "id", json_object_new_string(t->id));
			add_data(r, vm, e);
			continue;
		}
		c = json_object_new_object();
		json_object_object_add(c, "index", json_object_new_int(t->vcpu));
		json_object_object_add(c, "id", json_object_new_string(t->id));
		add_data(r, c, e);
		json_object_array_add(json_object_object_get(vm, "vcpus"), c);
	}
	if (r->rates && r->dt_ns)
		json_object_object_add(root, "interval", cli_json_double(r->dt_ns / 1e9));
	json_object_object_add(root, "vms", vms);
	json_object_object_add(root, "files", json_object_new_array());
	cli_print_json(r->cli, root);
	json_object_put(root);
	free(keys);
	return 0;
}

/* ---- CSV: one row per value ---------------------------------------- */

static void csv_entry(struct replay *r, struct csv *c,
		      const struct kvmstats_log_entry *e, const char *ts)
{
	const struct prev *p = r->rates ? rate_base(r, e) : NULL;
	const struct kvmstats_log_target *t = e->target;
	const struct kvmstats_stat *st;

	if (e->error)
		return;
	kvmstats_schema__for_each(st, e->schema) {
		const uint64_t *v = kvmstats_stat__values(st, e->data);
		bool miss = is_missing(e, st);
		double rate = NAN;

		if (p && kvmstats_stat__type(st) == KVMSTATS_TYPE_CUMULATIVE &&
		    !prev_missing(p, st))
			rate = kvmstats_stat__rate(st, p->data, e->data,
						   kvmstats_log_reader__time_ns(r->log) -
							   p->time_ns);
		for (uint32_t k = 0; k < kvmstats_stat__size(st); k++) {
			csv_field(c, ts);
			csv_int(c, t->pid);
			csv_field(c, t->name);
			csv_field(c, t->id);
			csv_value(c, t->vcpu, st, k, miss ? NULL : v);
			if (r->rates && (miss || isnan(rate)))
				csv_empty(c);
			else if (r->rates)
				csv_double(c, rate, 3);
			csv_end(c);
		}
	}
}

static void print_csv_sample(struct replay *r)
{
	static const char *const head[] = {
		"time", "pid", "name", "id", "vcpu", "stat", "index", "value",
	};
	struct csv c = { .f = stdout };
	char ts[32];

	if (!r->lines++) {
		for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
			csv_field(&c, head[i]);
		if (r->rates)
			csv_field(&c, "rate");
		csv_end(&c);
	}
	snprintf(ts, sizeof(ts), "%.6f", r->rt_ns / 1e9);
	for (size_t i = 0; i < kvmstats_log_reader__num_entries(r->log); i++) {
		const struct kvmstats_log_entry *e = kvmstats_log_reader__entry(r->log, i);

		if (target_chosen(r, e->target))
			csv_entry(r, &c, e, ts);
	}
}

/* ---- table: one line per sample ------------------------------------- */

static struct column *column(struct replay *r, const char *name)
{
	void *p;

	for (size_t i = 0; i < r->ncols; i++)
		if (!strcmp(r->cols[i].name, name))
			return &r->cols[i];
	if (r->fields_set && regexec(&r->fields, name, 0, NULL, 0))
		return NULL;
	/* After the --skip-zero pass the columns are fixed. */
	if (r->skip_zero && !r->counting)
		return NULL;
	p = realloc(r->cols, (r->ncols + 1) * sizeof(*r->cols));
	if (!p)
		return NULL;
	r->cols = p;
	r->cols[r->ncols] = (struct column){ .name = strdup(name) };
	if (!r->cols[r->ncols].name)
		return NULL;
	return &r->cols[r->ncols++];
}

static void sum_entry(struct replay *r, const struct kvmstats_log_entry *e)
{
	const struct prev *p = r->rates ? rate_base(r, e) : NULL;
	const struct kvmstats_stat *st;

	if (e->error)
		return;
	kvmstats_schema__for_each(st, e->schema) {
		unsigned int type = kvmstats_stat__type(st);
		struct column *c;
		uint64_t raw;
		double v;

		if (stat_is_hist(st) || is_missing(e, st))
			continue;
		c = column(r, kvmstats_stat__name(st));
		if (!c)
			continue;
		raw = kvmstats_stat__values(st, e->data)[0];
		if (r->rates && type == KVMSTATS_TYPE_CUMULATIVE) {
			if (!p || prev_missing(p, st))
				continue;
			v = kvmstats_stat__rate(st, p->data, e->data,
						kvmstats_log_reader__time_ns(r->log) -
							p->time_ns);
			if (isnan(v))
				continue;
			c->rate += v;
			c->rated = true;
		} else if (type == KVMSTATS_TYPE_PEAK) {
			c->raw = c->any && c->raw > raw ? c->raw : raw;
		} else {
			c->raw += raw;
		}
		c->any = true;
	}
}

static int col_width(const struct column *c)
{
	int n = (int)strlen(safe_str(c->name));

	return n > 9 ? n : 9;
}

/* @v in decimal, exactly (printf has no 128-bit conversion). */
static const char *u128_str(unsigned __int128 v, char *buf, size_t len)
{
	char *p = buf + len - 1;

	*p = '\0';
	do {
		*--p = (char)('0' + (int)(v % 10));
		v /= 10;
	} while (v && p > buf);
	return p;
}

static void print_cell(const struct replay *r, const struct column *c)
{
	char buf[48];
	int w = col_width(c);

	if (!c->any)
		printf(" %*s", w, "-");
	else if (c->rated)
		printf(" %*.1f", w, c->rate);
	else if (r->rates)	/* a level among rates: the same one decimal */
		printf(" %*s.0", w - 2, u128_str(c->raw, buf, sizeof(buf)));
	else
		printf(" %*s", w, u128_str(c->raw, buf, sizeof(buf)));
}

static void print_table_sample(struct replay *r)
{
	time_t t = (time_t)(r->rt_ns / 1000000000ull);
	bool any = false;
	struct tm tm;
	char ts[32];

	for (size_t c = 0; c < r->ncols; c++)
		r->cols[c].rate = 0, r->cols[c].raw = 0, r->cols[c].rated = false,
		r->cols[c].any = false;
	for (size_t i = 0; i < kvmstats_log_reader__num_entries(r->log); i++) {
		const struct kvmstats_log_entry *e = kvmstats_log_reader__entry(r->log, i);

		if (target_chosen(r, e->target))
			sum_entry(r, e);
	}
	for (size_t c = 0; c < r->ncols; c++) {
		r->cols[c].ever |= r->cols[c].any &&
				   (r->cols[c].rated ? r->cols[c].rate != 0 : r->cols[c].raw != 0);
		any |= r->cols[c].any;
	}
	/* With --rates the first sample has nothing to show. */
	if (r->counting || !any || !r->ncols)
		return;
	if (r->lines++ % HEADER_EVERY == 0) {
		printf("%-23s", "time");
		for (size_t c = 0; c < r->ncols; c++)
			printf(" %*s", col_width(&r->cols[c]), safe_str(r->cols[c].name));
		putchar('\n');
	}
	localtime_r(&t, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
	printf("%s.%03u", ts, (unsigned int)(r->rt_ns / 1000000 % 1000));
	for (size_t c = 0; c < r->ncols; c++)
		print_cell(r, &r->cols[c]);
	putchar('\n');
}

/* ---- the loop ------------------------------------------------------- */

const char *log_strerror(int err)
{
	/* The reader gave up on a forged or ruined file, and said why. */
	if (err == -EBADMSG)
		return "too damaged to read on (see the warning above)";
	return strerror(-err);
}

static int play(struct replay *r)
{
	uint64_t last = 0;
	int ret;

	while ((ret = kvmstats_log_reader__next(r->log)) > 0) {
		uint64_t mono = kvmstats_log_reader__time_ns(r->log);

		/* A new writer or file: its clock and targets start afresh. */
		if (kvmstats_log_reader__session_start(r->log)) {
			forget_all(r);
			last = 0;
		}
		r->rt_ns = kvmstats_log_reader__realtime_ns(r->log);
		r->dt_ns = last && mono > last ? mono - last : 0;
		last = mono;
		if (!in_bounds(r, r->rt_ns)) {
			remember(r);
			continue;
		}
		if (r->counting || r->cli->format == OUT_TABLE)
			print_table_sample(r);
		else if (r->cli->format == OUT_CSV)
			print_csv_sample(r);
		else if (print_json_sample(r))
			return -ENOMEM;
		remember(r);
	}
	return ret;
}

static void prev_reset(struct replay *r)
{
	for (size_t i = 0; i < r->cprev; i++) {
		free(r->prevs[i].data);
		free(r->prevs[i].missing);
	}
	free(r->prevs);
	r->prevs = NULL;
	r->cprev = r->nprev = 0;
}

/* --skip-zero: a first pass finds the columns that are ever non-zero. It
 * reads the log through a reader of its own, in a silent context, so that
 * damage is reported once, by the pass that prints. */
static int count_pass(struct replay *r)
{
	struct kvmstats_log_reader *log = r->log;
	struct kvmstats_ctx *quiet = kvmstats_ctx__new(NULL);
	size_t keep = 0;
	int ret = -ENOMEM;

	if (!quiet)
		return ret;
	r->log = kvmstats_log_reader__open(quiet, r->path, NULL);
	if (r->log) {
		r->counting = true;
		ret = play(r);
		r->counting = false;
		kvmstats_log_reader__close(r->log);
	} else {
		ret = -errno;
	}
	r->log = log;
	prev_reset(r);
	kvmstats_ctx__free(quiet);
	r->have_first = false;
	if (ret < 0)
		return ret;
	for (size_t c = 0; c < r->ncols; c++) {
		if (r->cols[c].ever)
			r->cols[keep++] = r->cols[c];
		else
			free(r->cols[c].name);
	}
	r->ncols = keep;
	return 0;
}

static int replay_opt(struct replay *r, int c, const char *arg)
{
	switch (c) {
	case OPT_FROM:
		return parse_bound(r->cli, "--from", arg, &r->from) ? -1 : 1;
	case OPT_TO:
		return parse_bound(r->cli, "--to", arg, &r->to) ? -1 : 1;
	case OPT_RATES:
		r->rates = true;
		return 1;
	case 'z':
		r->skip_zero = true;
		return 1;
	case 'p':
		return cli_add_pids(r->cli, arg, &r->pids, &r->npids, &r->pids_cap) ? -1 : 1;
	case 'g':
		return cli_parse_regex(r->cli, "--name", arg, &r->name_re, &r->name_set)
			       ? -1 : 1;
	case 'f':
		return cli_parse_regex(r->cli, "--fields", arg, &r->fields, &r->fields_set)
			       ? -1 : 1;
	}
	return 0;
}

static void replay_free(struct replay *r)
{
	prev_reset(r);
	for (size_t c = 0; c < r->ncols; c++)
		free(r->cols[c].name);
	free(r->cols);
	free(r->pids);
	if (r->name_set)
		regfree(&r->name_re);
	if (r->fields_set)
		regfree(&r->fields);
	kvmstats_log_reader__close(r->log);
}

static int replay_opt_cb(struct cli *cli, void *ctx, int key, const char *arg)
{
	(void)cli;
	return replay_opt(ctx, key, arg) < 0 ? -1 : 0;
}

static int replay_check(struct cli *cli, void *ctx)
{
	const struct replay *r = ctx;

	if (cli->format != OUT_TABLE && (r->fields_set || r->skip_zero))
		return cli_bad(cli, "--fields and --skip-zero choose the "
			       "table's columns; JSON and CSV have every stat");
	return 0;
}

static const struct cli_opt replay_opts[] = {
	{ "from", OPT_FROM, 0, "T", "the first sample",
	  "from T: epoch seconds, +S after the first, YYYY-MM-DD[THH:MM[:SS]]" },
	{ "to", OPT_TO, 0, "T", "the last sample", "until T (as --from)" },
	{ "rates", OPT_RATES, 0, NULL, NULL,
	  "rates between samples (JSON and CSV: beside the values)" },
	{ "pid", 'p', CLI_OPT_SHORT, "PID", "every VMM",
	  "only the VMs of this VMM (repeatable)" },
	{ "name", 'g', CLI_OPT_SHORT, "REGEX", "every name",
	  "only the VMs whose VMM name matches" },
	{ "guest", 'g', CLI_OPT_ALIAS, "REGEX", NULL, NULL },
	{ "fields", 'f', CLI_OPT_SHORT, "REGEX", "every stat",
	  "table: only the stats whose names match" },
	{ "skip-zero", 'z', CLI_OPT_SHORT, NULL, NULL,
	  "table: leave out the stats zero in every sample" },
	{ 0 },
};

static const struct cli_spec replay_spec = {
	.cmd = "replay",
	.operands = "FILE",
	.min_operands = 1,
	.max_operands = 1,
	.outputs = CLI_OUT_JSON | CLI_OUT_CSV,
	.text = "a table",
	.about = "Print a log written by 'kvmstats record': a line per sample "
		 "(stats summed over\nthe VMs), an object per sample "
		 "(--json), or a row per value (--csv).",
	.opts = replay_opts,
	.opt = replay_opt_cb,
	.check = replay_check,
};

int cmd_replay(struct cli *cli, int argc, char **argv)
{
	struct replay r = { .cli = cli };
	char why[512] = "";
	int c, ret = EXIT_FAIL;

	r.pids_cap = (size_t)argc + 1;
	r.pids = calloc(r.pids_cap, sizeof(*r.pids));
	if (!r.pids)
		return EXIT_FAIL;
	ret = cli_parse(cli, &replay_spec, &r, argc, argv);
	if (ret != CLI_PARSED)
		goto out;
	r.path = argv[optind];
	ret = EXIT_FAIL;
	r.log = kvmstats_log_reader__open(cli->ctx, r.path,
					  &(struct kvmstats_log_reader_opts){
						  .sz = sizeof(struct kvmstats_log_reader_opts),
						  .errbuf = why, .errbuf_sz = sizeof(why) });
	if (!r.log) {
		cli_err(cli, "%s", why[0] ? why : strerror(errno));
		goto out;
	}
	c = r.skip_zero && cli->format == OUT_TABLE ? count_pass(&r) : 0;
	if (c >= 0)
		c = play(&r);
	if (c < 0) {
		cli_err(cli, "%s: %s", r.path, log_strerror(c));
		goto out;
	}
	ret = EXIT_OK;
out:
	replay_free(&r);
	return ret;
}
