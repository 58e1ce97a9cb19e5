// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * How fast `kvmstats plan` is, against baselines measured in the same run
 * (these machines are shared and noisy):
 *
 *  1. zero test: each SIMD variant and the QEMU-style buffer_is_zero, 4 KiB
 *     at a time over a large zero buffer (the worst case: every byte is
 *     read), against the memory read bandwidth of a plain read loop over
 *     the same buffer; on one core and on every core;
 *  2. classification: PAGEMAP_SCAN against reading /proc/PID/pagemap, on
 *     a real QEMU VM;
 *  3. plan (scan method, no dirty interval) against the migration of the
 *     same VM to exec:cat > /dev/null, at QEMU's default max-bandwidth and
 *     unthrottled. Goal: plan under a tenth of the migration;
 *  4. the scan itself on one core, over our own memory standing in for a
 *     VMM's (anonymous: process_vm_readv; a memfd: pread on its file),
 *     against the read bandwidth of a plain loop over the same pages.
 *
 * `plan scan` runs part 4 only. Parts 2 and 3 need /dev/kvm, qemu-system-x86_64 and build/mbguest.elf;
 * they are skipped (and say so) without them.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats_mem.h"

#define BUF_BYTES (256ul << 20)
#define PAGE 4096ul
#define REPS 7

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- 1. zero test against memory bandwidth ---- */

struct job {
	const unsigned char *buf;
	size_t len;
	kvmstats_zero_fn fn;	/* NULL: the plain read loop */
	volatile uint64_t sink;
};

/* The baselines: plain read loops with no early exit and no per-page
 * call, one with 64-bit loads into eight accumulators, one with the
 * widest vector loads the CPU has; the faster is the machine's memory
 * read bandwidth. */
static uint64_t read_loop64(const unsigned char *p, size_t len)
{
	const uint64_t *w = (const uint64_t *)p;
	uint64_t a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, g = 0, h = 0;

	for (size_t i = 0; i < len / 8; i += 8) {
		a |= w[i];
		b |= w[i + 1];
		c |= w[i + 2];
		d |= w[i + 3];
		e |= w[i + 4];
		f |= w[i + 5];
		g |= w[i + 6];
		h |= w[i + 7];
	}
	return a | b | c | d | e | f | g | h;
}

typedef long long v4di __attribute__((vector_size(32)));

__attribute__((target("avx2")))
static uint64_t read_loop256(const unsigned char *p, size_t len)
{
	const v4di *w = (const v4di *)p;
	v4di a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };

	for (size_t i = 0; i < len / 32; i += 4) {
		a |= w[i];
		b |= w[i + 1];
		c |= w[i + 2];
		d |= w[i + 3];
	}
	a |= b | c | d;
	return (uint64_t)(a[0] | a[1] | a[2] | a[3]);
}

typedef long long v8di __attribute__((vector_size(64)));

__attribute__((target("avx512f")))
static uint64_t read_loop512(const unsigned char *p, size_t len)
{
	const v8di *w = (const v8di *)p;
	v8di a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };

	for (size_t i = 0; i < len / 64; i += 4) {
		a |= w[i];
		b |= w[i + 1];
		c |= w[i + 2];
		d |= w[i + 3];
	}
	a |= b | c | d;
	return (uint64_t)(a[0] | a[1] | a[2] | a[3] | a[4] | a[5] | a[6] | a[7]);
}

static bool wide_reads(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

static bool widest_reads(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}

static bool plain_zero(const void *buf, size_t len)
{
	return !read_loop64(buf, len);
}

static bool plain_zero256(const void *buf, size_t len)
{
	return !read_loop256(buf, len);
}

static bool plain_zero512(const void *buf, size_t len)
{
	return !read_loop512(buf, len);
}

static void *run_job(void *arg)
{
	struct job *j = arg;
	uint64_t acc = 0;

	if (j->fn == plain_zero || j->fn == plain_zero256 || j->fn == plain_zero512) {
		acc = j->fn(j->buf, j->len);	/* one call over the slice */
	} else {
		for (size_t off = 0; off < j->len; off += PAGE)
			acc += j->fn(j->buf + off, PAGE);
	}
	j->sink = acc;
	return NULL;
}

/* GB/s of one pass over the buffer on @threads threads, each on its
 * own slice. */
static double one_pass(const unsigned char *buf, kvmstats_zero_fn fn, int threads)
{
	pthread_t tid[64];
	struct job jobs[64];
	size_t slice = BUF_BYTES / (size_t)threads / PAGE * PAGE;
	double t0 = now();

	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){ buf + (size_t)i * slice, slice, fn, 0 };
		pthread_create(&tid[i], NULL, run_job, &jobs[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	return (double)(slice * (size_t)threads) / (now() - t0) / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The three read loops, then every zero-test variant. */
#define NLOOPS 3
#define NFN (NLOOPS + KVMSTATS_ZERO_NR - 1)

/* Rounds of every contender in turn, so that the machine's drift hits
 * them alike: per contender the median GB/s and the median of its ratio
 * to the bandwidth (the faster read loop) measured in the same round. */
static void rounds(const unsigned char *buf, kvmstats_zero_fn *fns, int threads,
		   double *gbs, double *ratio)
{
	static double v[NFN][REPS], r[NFN][REPS];

	for (int k = 0; k < REPS; k++) {
		double base;

		for (int i = 0; i < NFN; i++) {
			int f = (i + k) % NFN;

			v[f][k] = fns[f] ? one_pass(buf, fns[f], threads) : 0;
		}
		base = 0;
		for (int f = 0; f < NLOOPS; f++)
			base = v[f][k] > base ? v[f][k] : base;
		for (int f = 0; f < NFN; f++)
			r[f][k] = v[f][k] / base;
	}
	for (int f = 0; f < NFN; f++) {
		gbs[f] = median(v[f], REPS);
		ratio[f] = median(r[f], REPS);
	}
}

static void bench_zero(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int nthreads = cpus > 64 ? 64 : (int)cpus;
	unsigned char *buf = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	kvmstats_zero_fn fns[NFN] = { plain_zero, wide_reads() ? plain_zero256 : NULL,
				      widest_reads() ? plain_zero512 : NULL };
	static const char *const loops[NLOOPS] = {
		"read loop, 64-bit loads", "read loop, 256-bit loads",
		"read loop, 512-bit loads" };
	double gbs[NFN], ratio[NFN];

	if (buf == MAP_FAILED) {
		perror("mmap");
		return;
	}
	memset(buf, 0, BUF_BYTES);	/* real pages, not the zero page */
	for (int i = KVMSTATS_ZERO_INT; i < KVMSTATS_ZERO_NR; i++)
		fns[NLOOPS - 1 + i] = kvmstats_zero__get(i);
	for (int threads = 1; threads <= nthreads; threads = threads == 1 ? nthreads : threads + 1) {
		rounds(buf, fns, threads, gbs, ratio);
		printf("zero test, %d thread%s, %lu MiB of zero pages, 4 KiB per call "
		       "(medians of %d interleaved rounds):\n", threads,
		       threads > 1 ? "s" : "", BUF_BYTES >> 20, REPS);
		for (int f = 0; f < NLOOPS; f++)
			if (fns[f])
				printf("  %-28s %7.2f GB/s   %5.1f%% of the bandwidth\n",
				       loops[f], gbs[f], 100 * ratio[f]);
		printf("  (bandwidth: the fastest read loop of each round)\n");
		for (int i = KVMSTATS_ZERO_INT; i < KVMSTATS_ZERO_NR; i++) {
			if (!fns[NLOOPS - 1 + i]) {
				printf("  %-28s   (not supported by this CPU)\n",
				       kvmstats_zero__name(i));
				continue;
			}
			printf("  %-28s %7.2f GB/s   %5.1f%% of the bandwidth\n",
			       i == KVMSTATS_ZERO_QEMU ? "qemu-style buffer_is_zero" :
			       kvmstats_zero__name(i), gbs[NLOOPS - 1 + i],
			       100 * ratio[NLOOPS - 1 + i]);
		}
		if (nthreads == 1)
			break;
	}
	munmap(buf, BUF_BYTES);
}

/* ---- a QEMU VM and a tiny QMP client ---- */

struct vm {
	pid_t pid;
	char dir[64], qmp[96], serial[96];
};

static int vm_start(struct vm *v, const char *mem, const char *append)
{
	char sarg[128], qarg[160];

	snprintf(v->dir, sizeof(v->dir), "/tmp/kvmstats-bench.XXXXXX");
	if (!mkdtemp(v->dir))
		return -errno;
	snprintf(v->qmp, sizeof(v->qmp), "%s/qmp", v->dir);
	snprintf(v->serial, sizeof(v->serial), "%s/serial", v->dir);
	snprintf(sarg, sizeof(sarg), "file:%s", v->serial);
	snprintf(qarg, sizeof(qarg), "unix:%s,server=on,wait=off", v->qmp);
	v->pid = fork();
	if (v->pid < 0)
		return -errno;
	if (!v->pid) {
		int null = open("/dev/null", O_WRONLY);

		/* Never outlive the benchmark, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 1);
		dup2(null, 2);
		execlp("qemu-system-x86_64", "qemu-system-x86_64", "-enable-kvm",
		       "-m", mem, "-display", "none", "-nodefaults", "-no-user-config",
		       "-name", "guest=bench", "-serial", sarg, "-qmp", qarg, "-kernel",
		       "build/mbguest.elf", "-append", append, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1200; i++) {	/* 120 s */
		char line[256] = "";
		FILE *f = fopen(v->serial, "r");
		bool ready = false;

		while (f && fgets(line, sizeof(line), f))
			ready |= !strncmp(line, "READY", 5);
		if (f)
			fclose(f);
		if (ready)
			return 0;
		if (waitpid(v->pid, NULL, WNOHANG) == v->pid) {
			v->pid = 0;
			return -ECHILD;
		}
		usleep(100000);
	}
	return -ETIMEDOUT;
}

static void vm_stop(struct vm *v)
{
	char cmd[128];

	if (v->pid > 0) {
		kill(v->pid, SIGTERM);
		waitpid(v->pid, NULL, 0);
	}
	v->pid = 0;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", v->dir);
	if (v->dir[0] && system(cmd))
		fprintf(stderr, "could not remove %s\n", v->dir);
}

/* Run one QMP command; returns the "return" member (caller puts it). */
static struct json_object *qmp(const struct vm *v, const char *cmd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct json_object *ret = NULL;
	char line[65536];
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), n = 0;
	FILE *f;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", v->qmp);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	f = fdopen(fd, "r+");
	fprintf(f, "{\"execute\":\"qmp_capabilities\"}\n%s\n", cmd);
	fflush(f);
	while (fgets(line, sizeof(line), f)) {
		struct json_object *o = json_tokener_parse(line), *r;

		if (o && json_object_object_get_ex(o, "QMP", NULL)) {
			json_object_put(o);
			continue;
		}
		if (o && (json_object_object_get_ex(o, "return", &r) ||
			  json_object_object_get_ex(o, "error", &r)) && ++n == 2) {
			ret = json_object_get(r);
			json_object_put(o);
			break;
		}
		json_object_put(o);
	}
	fclose(f);
	return ret;
}

/* Migrate to a pipe into /dev/null; QEMU's total-time in seconds. */
static double migrate(const struct vm *v, long long max_bandwidth)
{
	char cmd[256];
	double total = -1;

	snprintf(cmd, sizeof(cmd), "{\"execute\":\"migrate-set-parameters\","
		 "\"arguments\":{\"max-bandwidth\":%lld}}", max_bandwidth);
	json_object_put(qmp(v, cmd));
	json_object_put(qmp(v, "{\"execute\":\"migrate\",\"arguments\":"
			       "{\"uri\":\"exec:cat > /dev/null\"}}"));
	for (int i = 0; i < 1200 && total < 0; i++) {
		struct json_object *r = qmp(v, "{\"execute\":\"query-migrate\"}"), *s, *t;

		if (r && json_object_object_get_ex(r, "status", &s) &&
		    !strcmp(json_object_get_string(s), "completed") &&
		    json_object_object_get_ex(r, "total-time", &t)) {
			total = (double)json_object_get_int64(t) / 1e3;
			if (getenv("BENCH_DEBUG"))
				fprintf(stderr, "%s\n", json_object_to_json_string(r));
		}
		else if (r && json_object_object_get_ex(r, "status", &s) &&
			 !strcmp(json_object_get_string(s), "failed"))
			i = 1200;
		json_object_put(r);
		if (total < 0)
			usleep(10000);
	}
	return total;
}

/* ---- 2. classification modes ---- */

static double classify_ms(struct kvmstats_ram *ram, enum kvmstats_pagemap_mode mode,
			  int reps, struct kvmstats_pagemap_counts *c)
{
	double best = 1e9;

	for (int i = 0; i < reps; i++) {
		double t0 = now();
		struct kvmstats_pages *pg = kvmstats_pages__classify(ram,
			&(struct kvmstats_pages_opts){ .sz = sizeof(struct kvmstats_pages_opts),
						       .mode = mode });

		if (!pg)
			return -1;
		if (now() - t0 < best)
			best = now() - t0;
		*c = *kvmstats_pages__counts(pg);
		kvmstats_pages__free(pg);
	}
	return best * 1e3;
}

static void bench_pagemap(const struct vm *v)
{
	struct kvmstats_ram *ram = kvmstats_ram__open(v->pid, NULL);
	struct kvmstats_pagemap_counts a, b;
	double scan, rd;

	if (!ram) {
		printf("pagemap: cannot find the VM's RAM: %s\n", strerror(errno));
		return;
	}
	scan = kvmstats_pagemap_scan_supported() ?
		       classify_ms(ram, KVMSTATS_PAGEMAP_SCAN, 20, &a) : -1;
	rd = classify_ms(ram, KVMSTATS_PAGEMAP_READ, 5, &b);
	printf("pagemap estimator, %.0f MiB of guest RAM, %llu present pages:\n",
	       (double)kvmstats_ram__bytes(ram) / 1048576.0, (unsigned long long)b.present);
	printf("  %-28s %9.3f ms   (baseline)\n", "read /proc/PID/pagemap", rd);
	if (scan >= 0)
		printf("  %-28s %9.3f ms   %.1fx faster%s\n", "PAGEMAP_SCAN ioctl", scan,
		       rd / scan, memcmp(&a, &b, sizeof(a)) ? " (counts differ!)" : ", same counts");
	else
		printf("  PAGEMAP_SCAN: not supported by this kernel\n");
	kvmstats_ram__free(ram);
}

/* ---- 3. plan against migration ---- */

/* Best wall time of a whole plan (RAM over QMP, classification, the
 * estimator, the model) with @max_cpu cores for the scan. */
static double plan_s(pid_t pid, unsigned int methods, double max_cpu,
		     struct kvmstats_plan_vm *out)
{
	struct kvmstats_scan_opts so = { .sz = sizeof(so), .max_cpu = max_cpu };
	double best = 1e9;

	for (int i = 0; i < REPS; i++) {
		double t0 = now();
		struct kvmstats_plan *p = kvmstats_plan__new(pid, &(struct kvmstats_plan_opts){
			.sz = sizeof(struct kvmstats_plan_opts), .methods = methods,
			.flags = KVMSTATS_PLAN_ASSUME_CLEAN, .scan = &so }, NULL, 0);

		if (!p || kvmstats_plan__estimate(p) || kvmstats_plan__predict(p)) {
			fprintf(stderr, "plan: %s\n", p ? kvmstats_plan__result(p)->error_msg :
				strerror(errno));
			kvmstats_plan__free(p);
			return -1;
		}
		if (now() - t0 < best)
			best = now() - t0;
		*out = *kvmstats_plan__result(p);
		kvmstats_plan__free(p);
	}
	return best;
}

static void bench_vs_migration(void)
{
	static const char append[] = "nonzero=512M zero=128M stride=4K";
	struct kvmstats_plan_vm r;
	uint64_t nz;
	double scan, scan_all, pgm, mig_def, mig_fast;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct vm v = { 0 }, w = { 0 };
	int err;

	if (access("/dev/kvm", R_OK | W_OK) || access("build/mbguest.elf", R_OK)) {
		printf("plan vs migration: skipped (needs /dev/kvm and build/mbguest.elf)\n");
		return;
	}
	err = vm_start(&v, "1024", append);
	if (!err)
		err = vm_start(&w, "1024", append);
	if (err) {
		printf("plan vs migration: skipped (QEMU: %s)\n", strerror(-err));
		goto out;
	}
	bench_pagemap(&v);
	pgm = plan_s(v.pid, 1u << KVMSTATS_METHOD_PAGEMAP, 1, &r);
	scan_all = plan_s(v.pid, 1u << KVMSTATS_METHOD_SCAN, (double)cpus, &r);
	scan = plan_s(v.pid, 1u << KVMSTATS_METHOD_SCAN, 1, &r);
	mig_def = migrate(&v, 128ll << 20);
	mig_fast = migrate(&w, 1ll << 40);
	printf("plan vs live migration, 1 GiB VM, 512 MiB of data, 128 MiB written zero:\n");
	nz = r.est[KVMSTATS_METHOD_SCAN].nonzero_pages;
	if (r.pred.converges)
		printf("  plan --method scan found %llu non-zero pages, "
		       "predicts %.1f MiB, %.2f s at 128 MiB/s\n",
		       (unsigned long long)nz, (double)r.pred.bytes / 1048576.0,
		       r.pred.seconds);
	else /* (its figures are where the model gave up) */
		printf("  plan --method scan found %llu non-zero pages, "
		       "predicts no convergence at 128 MiB/s\n",
		       (unsigned long long)nz);
	printf("  %-36s %8.3f s   (baseline)\n", "migration at 128 MiB/s (default)", mig_def);
	printf("  %-36s %8.3f s\n", "migration unthrottled", mig_fast);
	printf("  %-36s %8.3f s   %.3f of the default migration, %.3f of the "
	       "unthrottled one (goal < 0.1)\n", "plan --method scan --interval 0", scan,
	       scan / mig_def, scan / mig_fast);
	printf("  %-36s %8.3f s   %.3f of the default migration, %.3f of the "
	       "unthrottled one\n", "  same, --max-cpu (all cores)", scan_all,
	       scan_all / mig_def, scan_all / mig_fast);
	printf("  %-36s %8.3f s   %.4f of the default migration, %.4f of the "
	       "unthrottled one\n", "plan --method pagemap --interval 0", pgm,
	       pgm / mig_def, pgm / mig_fast);
out:
	vm_stop(&v);
	vm_stop(&w);
}

/* ---- 4. the scan against memory bandwidth ---- */

#define SCAN_BYTES (256ul << 20)

/* GB/s of one scan of @m (our own pages, every one a candidate). */
static double scan_pass(const struct kvmstats_pages *pg)
{
	struct kvmstats_estimate e;
	double t0 = now();

	if (kvmstats_pages__scan(pg, &(struct kvmstats_scan_opts){
			.sz = sizeof(struct kvmstats_scan_opts), .max_cpu = 1 }, &e) ||
	    e.zero_pages != SCAN_BYTES / PAGE)
		return 0;
	return (double)SCAN_BYTES / (now() - t0) / 1e9;
}

static void scan_one(const char *what, unsigned char *m)
{
	struct kvmstats_range r = { (uintptr_t)m, (uintptr_t)m + SCAN_BYTES };
	struct kvmstats_ram *ram;
	struct kvmstats_pages *pg = NULL;
	double gbs[REPS], ratio[REPS], bw;
	char err[256] = "";

	memset(m, 0, SCAN_BYTES);	/* present zero pages: all tested */
	ram = kvmstats_ram__open(getpid(), &(struct kvmstats_ram_opts){
		.sz = sizeof(struct kvmstats_ram_opts), .ranges = &r, .nranges = 1,
		.errbuf = err, .errbuf_sz = sizeof(err) });
	if (ram)
		pg = kvmstats_pages__classify(ram, NULL);
	if (!pg) {
		printf("  %-28s   skipped: %s\n", what, err[0] ? err : strerror(errno));
		kvmstats_ram__free(ram);
		return;
	}
	for (int k = 0; k < REPS; k++) {
		bw = (double)SCAN_BYTES / 1e9;
		{
			double t0 = now();
			volatile uint64_t sink = read_loop64(m, SCAN_BYTES);

			(void)sink;
			bw /= now() - t0;
		}
		gbs[k] = scan_pass(pg);
		ratio[k] = gbs[k] / bw;
	}
	printf("  %-28s %7.2f GB/s   %5.1f%% of the bandwidth\n", what,
	       median(gbs, REPS), 100 * median(ratio, REPS));
	kvmstats_pages__free(pg);
	kvmstats_ram__free(ram);
}

static void bench_scan(void)
{
	unsigned char *anon = mmap(NULL, SCAN_BYTES, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int fd = memfd_create("kvmstats-bench", MFD_CLOEXEC);
	unsigned char *shm = MAP_FAILED;

	if (fd >= 0 && !ftruncate(fd, (off_t)SCAN_BYTES))
		shm = mmap(NULL, SCAN_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("scan, one core, %lu MiB of present zero pages (medians of %d rounds, "
	       "each against a 64-bit read loop over the same pages):\n",
	       SCAN_BYTES >> 20, REPS);
	if (anon != MAP_FAILED) {
		madvise(anon, SCAN_BYTES, MADV_NOHUGEPAGE);
		scan_one("anonymous (process_vm_readv)", anon);
		munmap(anon, SCAN_BYTES);
	}
	if (shm != MAP_FAILED) {
		scan_one("memfd (read from its file)", shm);
		munmap(shm, SCAN_BYTES);
	}
	if (fd >= 0)
		close(fd);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);	/* a closed pipe must not skip vm_stop() */
	if (argc > 1 && !strcmp(argv[1], "scan")) {
		bench_scan();
		return 0;
	}
	printf("zero test dispatch picks: %s\n", kvmstats_zero__name(KVMSTATS_ZERO_BEST));
	bench_zero();
	bench_scan();
	bench_vs_migration();
	return 0;
}
