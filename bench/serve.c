// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * bench/serve: what one scrape of `kvmstats serve` costs on a large host,
 * split into reading and rendering, each against a baseline measured in
 * the same run (these machines are shared and noisy):
 *
 *   reading   kvmstats_host__sweep_parallel() on one thread, and on one
 *             thread per core, against a bare pread loop over the same
 *             stats fds (goals: <= 1.2x on one thread; >= 1.6x shorter
 *             wall time with a thread per core on 2 cores);
 *   rendering the exporter's renderer against a plain snprintf of the
 *             same lines into one buffer (goal: no slower; the two
 *             outputs are compared byte for byte first).
 *
 * The host is our own VMM: tinyvmm --no-run --hold-stats --vms 1000
 * --vcpus 4 (5000 stats fds). Options: --vms N --vcpus M --rounds R.
 * Prints medians; it is a measurement, not a test.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The exporter's model and renderer, built into this program as they are
 * into kvmstats (the bench links only libkvmstats). */
#include "../cli/prom_model.c"
#include "../cli/prom_text.c"
#include "../cli/prom_expo.c"
#include "../cli/sanitize.c"

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct timing {
	uint64_t *wall, *cpu;
	int n;
};

static void t_add(struct timing *t, uint64_t wall, uint64_t cpu)
{
	t->wall[t->n] = wall;
	t->cpu[t->n++] = cpu;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median_ms(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return n ? v[n / 2] / 1e6 : 0;
}

/* The fastest round: what the code costs when nothing else ran. */
static double best_ms(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return n ? v[0] / 1e6 : 0;
}

/* ---- the VMM ---------------------------------------------------------- */

static pid_t vmm_pid;

static void stop_vmm(void)
{
	if (vmm_pid > 0) {
		kill(vmm_pid, SIGTERM);
		waitpid(vmm_pid, NULL, 0);
		vmm_pid = 0;
	}
}

static void on_signal(int sig)
{
	(void)sig;
	stop_vmm();
	_exit(1);
}

static int start_vmm(unsigned int vms, unsigned int vcpus)
{
	char self[PATH_MAX], tiny[PATH_MAX + 16], ready[64], nvms[16], nvcpus[16];
	const char *env = getenv("TINYVMM");
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n < 0)
		return -1;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	snprintf(tiny, sizeof(tiny), "%s/../tinyvmm", self);
	if (env)
		snprintf(tiny, sizeof(tiny), "%s", env);
	snprintf(ready, sizeof(ready), "/tmp/bench-serve.%d.ready", (int)getpid());
	snprintf(nvms, sizeof(nvms), "%u", vms);
	snprintf(nvcpus, sizeof(nvcpus), "%u", vcpus);
	unlink(ready);
	vmm_pid = fork();
	if (vmm_pid < 0)
		return -1;
	if (!vmm_pid) {
		execl(tiny, tiny, "--no-run", "--hold-stats", "--vms", nvms, "--vcpus",
		      nvcpus, "--ready", ready, "--timeout", "600", (char *)NULL);
		fprintf(stderr, "bench/serve: %s: %s\n", tiny, strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < 1200; i++) {
		if (!access(ready, F_OK)) {
			unlink(ready);
			return 0;
		}
		if (waitpid(vmm_pid, NULL, WNOHANG) == vmm_pid) {
			vmm_pid = 0;
			return -1;
		}
		usleep(50000);
	}
	return -1;
}

/* ---- baselines ----------------------------------------------------------- */

struct fdset {
	int *fd;
	off_t *off;
	size_t *size;
	size_t n;
	char buf[65536];
};

static int collect(struct kvmstats_reader *r, void *arg)
{
	struct fdset *s = arg;
	struct kvmstats_schema *sc = kvmstats_reader__schema(r);

	s->fd[s->n] = kvmstats_reader__fd(r);
	s->off[s->n] = kvmstats_schema__data_offset(sc);
	s->size[s->n++] = kvmstats_schema__data_size(sc);
	return 0;
}

static size_t for_each_reader(struct kvmstats_host *h,
			      int (*fn)(struct kvmstats_reader *, void *), void *arg)
{
	size_t n = 0;

	for (size_t i = 0; i < kvmstats_host__num_vmms(h); i++) {
		struct kvmstats_vmm *v = kvmstats_host__vmm(h, i);

		for (size_t j = 0; j < kvmstats_vmm__num_vms(v); j++) {
			struct kvmstats_vm *vm = kvmstats_vmm__vm(v, j);
			int index;

			if (kvmstats_vm__reader(vm)) {
				n++;
				if (fn)
					fn(kvmstats_vm__reader(vm), arg);
			}
			for (size_t k = 0; k < kvmstats_vm__num_vcpus(vm); k++) {
				n++;
				if (fn)
					fn(kvmstats_vm__vcpu(vm, k, &index), arg);
			}
		}
	}
	return n;
}

/* The bare loop: one pread per fd into one buffer. */
static int pread_loop(struct fdset *s)
{
	int failed = 0;

	for (size_t i = 0; i < s->n; i++)
		if (pread(s->fd[i], s->buf, s->size[i], s->off[i]) != (ssize_t)s->size[i])
			failed++;
	return failed;
}

/* A plain exporter: every line formatted by snprintf from the numbers. */
static size_t plain_value(char *p, size_t room, uint64_t raw, struct scale sc)
{
	if (sc.mode == SCALE_POW10 && sc.exp < 0 && sc.exp >= -19) {
		uint64_t div = pow10_u64[-sc.exp];
		int n;

		if (!(raw % div))
			return (size_t)snprintf(p, room, "%" PRIu64, raw / div);
		n = snprintf(p, room, "%" PRIu64 ".%0*" PRIu64, raw / div, -sc.exp,
			     raw % div);
		while (p[n - 1] == '0')
			n--;
		return (size_t)n;
	}
	return (size_t)snprintf(p, room, "%" PRIu64, raw);
}

/* Bucket bounds as text, per family: computed once, as any exporter
 * would. */
static char (*plain_le[256])[48];

static void plain_setup(const struct prom_model *m)
{
	for (size_t fi = 0; fi < m->nfams && fi < 256; fi++) {
		const struct family *f = &m->fams[fi];

		if (f->kind != FAM_HIST)
			continue;
		plain_le[fi] = calloc(f->size, sizeof(*plain_le[fi]));
		for (uint32_t b = 0; b < f->size; b++) {
			const char *q = strchr(f->le[PROM_TEXT][b], '"') + 1;

			snprintf(plain_le[fi][b], 48, "%.*s", (int)(strchr(q, '"') - q), q);
		}
	}
}

static void plain_render(const struct prom_model *m, const struct kvmstats_host *h,
			 char *out, size_t cap, size_t *len)
{
	size_t o = 0;

	for (size_t fi = 0; fi < m->nfams; fi++) {
		const struct family *f = &m->fams[fi];

		o += (size_t)snprintf(out + o, cap - o, "%s", f->hdr[PROM_TEXT]);
		for (size_t i = 0; i < f->nseries; i++) {
			const struct series *s = &f->series[i];
			const struct target *t = &m->targets[s->target];
			struct kvmstats_vmm *v = kvmstats_host__vmm(h, 0);
			char lab[256], val[48];
			uint64_t cum = 0;

			if (!t->data)
				continue;
			/* The label text as a plain exporter formats it. */
			if (t->vcpu >= 0)
				snprintf(lab, sizeof(lab), "pid=\"%d\",name=\"%s\",vm=\"%u\",vcpu=\"%d\"",
					 (int)kvmstats_vmm__pid(v), kvmstats_vmm__name(v),
					 t->vm, t->vcpu);
			else
				snprintf(lab, sizeof(lab), "pid=\"%d\",name=\"%s\",vm=\"%u\"",
					 (int)kvmstats_vmm__pid(v), kvmstats_vmm__name(v), t->vm);
			switch (f->kind) {
			case FAM_COUNTER:
				plain_value(val, sizeof(val), t->data[s->off], f->scale);
				o += (size_t)snprintf(out + o, cap - o, "%s_total{%s} %s\n",
						      f->base, lab, val);
				break;
			case FAM_BOOL:
				o += (size_t)snprintf(out + o, cap - o, "%s{%s} %d\n", f->base,
						      lab, t->data[s->off] != 0);
				break;
			case FAM_GAUGE:
				plain_value(val, sizeof(val), t->data[s->off], f->scale);
				o += (size_t)snprintf(out + o, cap - o, "%s{%s} %s\n", f->base,
						      lab, val);
				break;
			case FAM_HIST:
				for (uint32_t b = 0; b < f->size; b++) {
					cum += t->data[s->off + b];
					o += (size_t)snprintf(out + o, cap - o,
							      "%s_bucket{%s,le=\"%s\"} %" PRIu64 "\n",
							      f->base, lab, plain_le[fi][b], cum);
				}
				if (s->sum_off >= 0) {
					plain_value(val, sizeof(val), t->data[s->sum_off],
						    f->sum_scale);
					o += (size_t)snprintf(out + o, cap - o, "%s_sum{%s} %s\n",
							      f->base, lab, val);
				}
				o += (size_t)snprintf(out + o, cap - o,
						      "%s_count{%s} %" PRIu64 "\n", f->base,
						      lab, cum);
				break;
			}
		}
	}
	*len = o;
}

/* Samples (time series) in an exposition: lines that are not comments. */
static size_t count_series(const char *p, size_t n)
{
	size_t lines = 0;
	const char *end = p + n;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));

		if (*p != '#')
			lines++;
		if (!nl)
			break;
		p = nl + 1;
	}
	return lines;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench/serve [--vms N] [--vcpus M] [--rounds R]\n");
	exit(2);
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static struct kvmstats_host *open_host(struct kvmstats_ctx *ctx, pid_t pid)
{
	struct kvmstats_host *h = kvmstats_host__new(ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts), .pids = &pid, .npids = 1,
		.source = "fd" });

	if (!h || kvmstats_host__refresh(h) < 0 || !kvmstats_host__num_vmms(h)) {
		fprintf(stderr, "bench/serve: cannot read the VMM's stats fds\n");
		return NULL;
	}
	return h;
}

static struct timing timing_new(int n)
{
	return (struct timing){ calloc((size_t)n, 8), calloc((size_t)n, 8), 0 };
}

/* Each reading is measured as a scrape meets it: after a rendering has
 * pushed everything out of the core's caches. Writing 16 MiB (4x this
 * machine's L2) gives every contender the same start. */
static char *evict_buf;
#define EVICT_SIZE (16u << 20)

static void evict(void)
{
	if (!evict_buf)
		evict_buf = malloc(EVICT_SIZE);
	for (size_t i = 0; evict_buf && i < EVICT_SIZE; i += 64)
		evict_buf[i]++;
}

#define MEASURE(t, clk, expr)                                                  \
	do {                                                                   \
		evict();                                                       \
		uint64_t w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(clk);   \
		expr;                                                          \
		t_add(&(t), clock_ns(CLOCK_MONOTONIC) - w0, clock_ns(clk) - c0); \
	} while (0)

static void row(const char *what, struct timing *t, const char *extra)
{
	double w = median_ms(t->wall, t->n), b = best_ms(t->wall, t->n);
	double c = median_ms(t->cpu, t->n);

	printf("  %-36s %8.2f %8.2f %8.2f  %s\n", what, w, b, c, extra);
}

/* "a/b (best a/b)": medians, and fastest rounds. */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* a/b, round by round: the two were measured back to back, so a burst of
 * load from elsewhere hits both; the median of those ratios, and the
 * ratio of the fastest rounds. Call before anything sorts the rounds. */
static void ratio(char *buf, size_t len, struct timing *a, struct timing *b,
		  const char *what)
{
	double r[1000];
	int n = a->n < b->n ? a->n : b->n;

	for (int i = 0; i < n; i++)
		r[i] = (double)a->wall[i] / (double)b->wall[i];
	qsort(r, (size_t)n, sizeof(r[0]), cmp_double);
	snprintf(buf, len, "%.2fx (best rounds %.2fx) %s", n ? r[n / 2] : 0,
		 best_ms(a->wall, a->n) / best_ms(b->wall, b->n), what);
}

int main(int argc, char **argv)
{
	unsigned int vms = 1000, vcpus = 4, rounds = 30;
	struct timing base, one, par, ours, plain, pren, pgz;
	struct prom_expo ex = { 0 };
	struct prom_pool *pool = NULL;
	struct kvmstats_host *h1 = NULL, *hn = NULL;
	struct prom_buf out = { 0 }, gz = { 0 };
	struct prom_model *m = NULL;
	struct kvmstats_ctx *ctx;
	struct fdset *fds;
	char *pbuf = NULL;
	size_t plen = 0, nreaders, series, pcap;
	int ret = 1;

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--vms"))
			vms = (unsigned int)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--vcpus"))
			vcpus = (unsigned int)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = (unsigned int)atoi(argv[++i]);
		else
			usage();
	}
	if (!vms || !vcpus || !rounds || rounds > 1000)
		usage();
	if (access("/dev/kvm", R_OK | W_OK)) {
		printf("bench/serve: /dev/kvm is not available: nothing measured\n");
		return 0;
	}
	raise_nofile();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	atexit(stop_vmm);
	if (start_vmm(vms, vcpus)) {
		fprintf(stderr, "bench/serve: tinyvmm did not start (TINYVMM=path?)\n");
		return 1;
	}
	ctx = kvmstats_ctx__new(NULL);
	/* Two hosts over the same VMM: each keeps its own sweep threads. */
	h1 = open_host(ctx, vmm_pid);
	hn = h1 ? open_host(ctx, vmm_pid) : NULL;
	if (!hn)
		goto out;
	nreaders = for_each_reader(h1, NULL, NULL);
	fds = calloc(1, sizeof(*fds));
	fds->fd = calloc(nreaders, sizeof(int));
	fds->off = calloc(nreaders, sizeof(off_t));
	fds->size = calloc(nreaders, sizeof(size_t));
	for_each_reader(h1, collect, fds);
	base = timing_new(rounds), one = timing_new(rounds), par = timing_new(rounds);
	ours = timing_new(rounds), plain = timing_new(rounds);
	pren = timing_new(rounds), pgz = timing_new(rounds);
	pool = prom_pool_new(0);

	/* Warm up, build the model, check the two renderings agree. */
	kvmstats_host__sweep_parallel(h1, 1);
	kvmstats_host__sweep_parallel(hn, 0);
	m = prom_model_new(NULL);
	prom_model_update(m, h1);
	prom_model_prepare(m);
	prom_model_render_part(m, PROM_TEXT, 0, 1, &out);
	pcap = out.len * 2 + (1 << 20);
	pbuf = malloc(pcap);
	plain_setup(m);
	plain_render(m, h1, pbuf, pcap, &plen);
	if (out.failed || plen != out.len || memcmp(pbuf, out.p, plen)) {
		fprintf(stderr, "bench/serve: the two renderings differ (%zu vs %zu bytes)\n",
			out.len, plen);
		goto out;
	}
	series = count_series(out.p, out.len);

	for (unsigned int r = 0; r < rounds; r++) {
		MEASURE(base, CLOCK_THREAD_CPUTIME_ID, pread_loop(fds));
		MEASURE(one, CLOCK_PROCESS_CPUTIME_ID, kvmstats_host__sweep_parallel(h1, 1));
		MEASURE(par, CLOCK_PROCESS_CPUTIME_ID, kvmstats_host__sweep_parallel(hn, 0));
		MEASURE(plain, CLOCK_THREAD_CPUTIME_ID, plain_render(m, h1, pbuf, pcap, &plen));
		out.len = 0;
		MEASURE(ours, CLOCK_THREAD_CPUTIME_ID,
			prom_model_prepare(m);
			prom_model_render_part(m, PROM_TEXT, 0, 1, &out));
		prom_expo_reset(&ex, PROM_TEXT);
		MEASURE(pren, CLOCK_PROCESS_CPUTIME_ID,
			prom_model_prepare(m);
			prom_expo_render(pool, m, &ex));
		MEASURE(pgz, CLOCK_PROCESS_CPUTIME_ID, prom_expo_gzip(pool, &ex, &ex, 1));
	}

	{
		char r_one[160], r_par[160], r_ren[160], r_pren[160], extra[160];
		double pn, rp, zp, z1;
		uint64_t t0;

		/* Ratios first: a median sorts the rounds. */
		ratio(r_one, sizeof(r_one), &one, &base, "the baseline (goal <= 1.2x)");
		ratio(r_par, sizeof(r_par), &base, &par,
		      "shorter than the baseline (goal >= 1.6x)");
		ratio(r_ren, sizeof(r_ren), &ours, &plain, "the baseline (goal <= 1x)");
		ratio(r_pren, sizeof(r_pren), &ours, &pren, "shorter than 1 thread");
		pn = median_ms(par.wall, par.n);
		rp = median_ms(pren.wall, pren.n);
		zp = median_ms(pgz.wall, pgz.n);

		t0 = clock_ns(CLOCK_MONOTONIC);
		{
			z_stream z = { 0 };	/* one stream, one thread */

			deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
			deflate_part(&z, &out, &gz, true);
			deflateEnd(&z);
		}
		z1 = (clock_ns(CLOCK_MONOTONIC) - t0) / 1e6;

		printf("bench/serve: %u VMs x %u vCPUs: %zu stats fds, %zu families, "
		       "%zu series; %u rounds, %u threads\n",
		       vms, vcpus, nreaders, prom_model_families(m), series, rounds,
		       kvmstats_host__sweep_threads(hn));
		printf("%-38s %8s %8s %8s\n", "", "wall ms", "best ms", "CPU ms");
		printf("reading\n");
		row("bare pread loop (baseline)", &base, "");
		row("sweep, 1 thread", &one, r_one);
		row("sweep, a thread per core", &par, r_par);
		printf("rendering (text format, %.1f MB)\n", out.len / 1e6);
		row("plain snprintf (baseline)", &plain, "");
		row("kvmstats renderer, 1 thread", &ours, r_ren);
		row("kvmstats renderer, a thread per core", &pren, r_pren);
		snprintf(extra, sizeof(extra), "%.2fx shorter than 1 thread (%.1f ms)",
			 z1 / zp, z1);
		row("gzip -1, a thread per core", &pgz, extra);
		printf("scrape (parallel sweep + parallel render): %.2f ms, %.1f M series/s; "
		       "with gzip %.2f ms\n", pn + rp, series / ((pn + rp) / 1e3) / 1e6,
		       pn + rp + zp);
		printf("bytes per scrape: %zu plain, %zu gzip (parts), %zu gzip (one stream)\n",
		       prom_expo_len(&ex, false), prom_expo_len(&ex, true), gz.len + 18);
	}
	ret = 0;
out:
	prom_model_free(m);
	prom_expo_free(&ex);
	prom_pool_free(pool);
	prom_buf_free(&out);
	prom_buf_free(&gz);
	free(pbuf);
	kvmstats_host__free(h1);
	kvmstats_host__free(hn);
	stop_vmm();
	return ret;
}
