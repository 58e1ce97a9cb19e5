// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Files the CLI is handed, through the CLI itself (build/kvmstats, or the
 * one beside this test's directory, or $KVMSTATS): u64 values that a
 * double would round, printed exactly by `replay` in every format; image
 * files that are a FIFO with no writer (a clear error in bounded time,
 * not a hang), a pipe on standard input (`--file /dev/stdin`, `--file -`)
 * and a FIFO whose writer comes late.
 */
#include <limits.h>
#include <libgen.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "kvmstats_log.h"

#define F(t, u) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, KVMSTATS_BASE_POW10)

/* UINT64_MAX - 100: a double has it as 2^64, printed ...616. */
#define BIG 18446744073709551515ull
#define BIG_S "18446744073709551515"

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	{ "pages_4k", F(INSTANT, NONE), 0, 1, 0 },
	{ "max_hash", F(PEAK, NONE), 0, 1, 0 },
};

static char cli[PATH_MAX];
static char dir[] = "/tmp/kvmstats-test-files.XXXXXX";
static char img_path[PATH_MAX + 32];

/* The CLI of this build: build/tests/test_x -> build/kvmstats. */
static int find_cli(void)
{
	char self[PATH_MAX];
	ssize_t n;

	if (getenv("KVMSTATS")) {
		snprintf(cli, sizeof(cli), "%s", getenv("KVMSTATS"));
		return 0;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return -1;
	self[n] = '\0';
	snprintf(cli, sizeof(cli), "%s/kvmstats", dirname(dirname(self)));
	return 0;
}

static int setup(void **state)
{
	uint64_t v[3] = { 1, 2, 3 };
	unsigned char *img;
	size_t len;
	FILE *f;

	(void)state;
	if (find_cli() || !mkdtemp(dir))
		return -1;
	img = kvmstats_image__encode("kvm-7/vcpu-0", descs, 3, v, &len, NULL);
	snprintf(img_path, sizeof(img_path), "%s/img.bin", dir);
	f = fopen(img_path, "wb");
	if (!img || !f || fwrite(img, 1, len, f) != len || fclose(f))
		return -1;
	free(img);
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Run `sh -c CMD`, its standard output into @out; returns its status
 * (-1 when it did not exit) and, in @secs, how long it took. */
static int run(const char *cmd, char *out, size_t outsz, double *secs)
{
	struct timespec a, b;
	size_t n = 0;
	FILE *p;
	int st;

	clock_gettime(CLOCK_MONOTONIC, &a);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (n + 1 < outsz && !feof(p)) {
		size_t r = fread(out + n, 1, outsz - 1 - n, p);

		if (!r)
			break;
		n += r;
	}
	out[n] = '\0';
	/* Drain what did not fit, so that the command never blocks. */
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (secs)
		*secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool skip_without_cli(void)
{
	if (access(cli, X_OK) == 0)
		return false;
	print_message("no CLI at %s: skipped\n", cli);
	return true;
}

/* A log of two targets, two samples: values near 2^64 in each stat. */
static void write_log(const char *path)
{
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = KVMSTATS_LOG_TRUNCATE);
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_log_writer *w = kvmstats_log_writer__open(ctx, path, &o);
	struct kvmstats_reader *rd;
	uint64_t v[3] = { 0 };
	unsigned char *img;
	size_t len;

	img = kvmstats_image__encode("kvm-7/vcpu-0", descs, 3, v, &len, NULL);
	rd = kvmstats_reader__open_mem(ctx, img, len, NULL);
	assert_non_null(w);
	assert_non_null(rd);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(kvmstats_log_writer__begin(w, 1000000000ull * (k + 1),
							    1700000000000000000ull +
								    1000000000ull * k),
				 0);
		for (int c = 0; c < 2; c++) {
			struct kvmstats_log_target t = {
				.pid = 7, .uid = 1, .vcpu = c, .name = "big",
				.id = "kvm-7/vcpu-n", .source = "fd",
			};
			/* exits: one vCPU holds BIG, the other 0; pages_4k:
			 * 2^63 each, a sum of exactly 2^64; max_hash: BIG. */
			uint64_t d[3] = { c ? 0 : BIG - 1 + (uint64_t)k,
					  1ull << 63, BIG };

			assert_int_equal(kvmstats_log_writer__add(
						 w, &t, kvmstats_reader__schema(rd), d,
						 NULL, 0),
					 0);
		}
		assert_int_equal(kvmstats_log_writer__commit(w), 0);
	}
	kvmstats_log_writer__close(w);
	kvmstats_reader__close(rd);
	free(img);
	kvmstats_ctx__free(ctx);
}

/* replay prints u64 counters exactly: table, JSON, CSV. */
static void test_replay_exact_u64(void **state)
{
	char log[PATH_MAX + 32], cmd[3 * PATH_MAX], out[16384];

	(void)state;
	if (skip_without_cli())
		skip();
	snprintf(log, sizeof(log), "%s/big.log", dir);
	write_log(log);

	snprintf(cmd, sizeof(cmd), "%s replay %s", cli, log);
	assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
	print_message("%s", out);
	assert_non_null(strstr(out, BIG_S));
	/* The sum of the two vCPUs' pages_4k, 2^64, past u64 but exact. */
	assert_non_null(strstr(out, "18446744073709551616"));
	assert_null(strstr(out, "e+"));

	snprintf(cmd, sizeof(cmd), "%s replay --json %s", cli, log);
	assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
	assert_non_null(strstr(out, "\"exits\":" BIG_S));
	assert_non_null(strstr(out, "\"max_hash\":" BIG_S));

	snprintf(cmd, sizeof(cmd), "%s replay --csv %s", cli, log);
	assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
	assert_non_null(strstr(out, ",exits,0," BIG_S "\r\n"));
	assert_non_null(strstr(out, ",max_hash,0," BIG_S "\r\n"));
}

/* One target, samples 2 s apart: exits known, then unknown (the source
 * refused it: its word 0, its bit in the missing bitmap), then known
 * again, twice. */
static void write_gap_log(const char *path)
{
	static const uint64_t exits[4] = { 1000000, 0, 1000100, 1000300 };
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = KVMSTATS_LOG_TRUNCATE);
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_log_writer *w = kvmstats_log_writer__open(ctx, path, &o);
	struct kvmstats_reader *rd;
	uint64_t v[3] = { 0 }, miss[1] = { 1 };	/* exits is stat 0 */
	unsigned char *img;
	size_t len;

	img = kvmstats_image__encode("kvm-7/vcpu-0", descs, 3, v, &len, NULL);
	rd = kvmstats_reader__open_mem(ctx, img, len, NULL);
	assert_non_null(w);
	assert_non_null(rd);
	for (int k = 0; k < 4; k++) {
		struct kvmstats_log_target t = {
			.pid = 7, .uid = 1, .vcpu = 0, .name = "gap",
			.id = "kvm-7/vcpu-0", .source = "qmp",
		};
		uint64_t d[3] = { exits[k], 5, 5 };

		assert_int_equal(kvmstats_log_writer__begin(w, 2000000000ull * (k + 1),
							    1700000000000000000ull +
								    2000000000ull * k),
				 0);
		assert_int_equal(kvmstats_log_writer__add(w, &t, kvmstats_reader__schema(rd),
							  d, k == 1 ? miss : NULL, 0),
				 0);
		assert_int_equal(kvmstats_log_writer__commit(w), 0);
	}
	kvmstats_log_writer__close(w);
	kvmstats_reader__close(rd);
	free(img);
	kvmstats_ctx__free(ctx);
}

/* replay --rates: no rate over a sample that did not know the counter
 * (its 0 there: 1000100 exits over 2 s would be 500050/s), in every
 * format; a rate again once two samples know it (200 over 2 s). */
static void test_replay_rates_unknown_before(void **state)
{
	static const char *const fmts[] = { "", "--json ", "--csv " };
	char log[PATH_MAX + 32], cmd[3 * PATH_MAX], out[16384];

	(void)state;
	if (skip_without_cli())
		skip();
	snprintf(log, sizeof(log), "%s/gap.log", dir);
	write_gap_log(log);
	for (size_t i = 0; i < 3; i++) {
		snprintf(cmd, sizeof(cmd), "%s replay --rates %s%s", cli, fmts[i], log);
		assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
		print_message("%s", out);
		assert_null(strstr(out, "500050"));
		assert_non_null(strstr(out, "100"));
	}
	snprintf(cmd, sizeof(cmd), "%s replay --rates --json %s", cli, log);
	assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
	assert_non_null(strstr(out, "\"rates\":{\"exits\":null}"));
	assert_non_null(strstr(out, "\"rates\":{\"exits\":100.0}"));
}

/* A FIFO nobody writes to: an error that says so, within seconds. The
 * outer timeout only keeps a failing CLI from hanging the test. */
static void test_dump_fifo_no_writer(void **state)
{
	char fifo[PATH_MAX + 32], cmd[3 * PATH_MAX], out[4096];
	double secs;
	int st;

	(void)state;
	if (skip_without_cli())
		skip();
	snprintf(fifo, sizeof(fifo), "%s/nowriter", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(cmd, sizeof(cmd), "timeout -s KILL 30 %s dump --file %s 2>&1", cli, fifo);
	st = run(cmd, out, sizeof(out), &secs);
	print_message("status %d after %.1f s: %s", st, secs, out);
	assert_true(st > 0 && st != 137);
	assert_non_null(strstr(out, "FIFO without a writer"));
	assert_true(secs < 25);
}

/* A FIFO whose writer comes a moment later, and writes the image. */
static void test_dump_fifo_late_writer(void **state)
{
	char fifo[PATH_MAX + 32], cmd[6 * PATH_MAX], out[8192];

	(void)state;
	if (skip_without_cli())
		skip();
	snprintf(fifo, sizeof(fifo), "%s/late", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(cmd, sizeof(cmd),
		 "(sleep 0.5; cat %s >%s) & timeout -s KILL 30 %s dump --json --file %s; "
		 "st=$?; wait; exit $st",
		 img_path, fifo, cli, fifo);
	assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
	assert_non_null(strstr(out, "\"exits\":1"));
}

/* `cat img | kvmstats dump --file /dev/stdin` and `--file -`: a pipe
 * has no offsets (pread fails with ESPIPE), so it is read as a stream. */
static void test_dump_stdin_pipe(void **state)
{
	static const char *const names[] = { "/dev/stdin", "-" };
	char cmd[3 * PATH_MAX], out[8192];

	(void)state;
	if (skip_without_cli())
		skip();
	for (size_t i = 0; i < 2; i++) {
		snprintf(cmd, sizeof(cmd),
			 "cat %s | timeout -s KILL 30 %s dump --json --file %s 2>&1",
			 img_path, cli, names[i]);
		assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
		print_message("--file %s: %.200s\n", names[i], out);
		assert_non_null(strstr(out, "\"exits\":1"));
		assert_non_null(strstr(out, "\"max_hash\":3"));
		/* Standard input that is a regular file reads the same. */
		snprintf(cmd, sizeof(cmd), "timeout -s KILL 30 %s dump --json --file %s <%s",
			 cli, names[i], img_path);
		assert_int_equal(run(cmd, out, sizeof(out), NULL), 0);
		assert_non_null(strstr(out, "\"pages_4k\":2"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_replay_exact_u64),
		cmocka_unit_test(test_replay_rates_unknown_before),
		cmocka_unit_test(test_dump_fifo_no_writer),
		cmocka_unit_test(test_dump_fifo_late_writer),
		cmocka_unit_test(test_dump_stdin_pipe),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
