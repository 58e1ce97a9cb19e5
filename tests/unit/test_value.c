// SPDX-License-Identifier: GPL-2.0-or-later
/* Decoding: unit scaling, human formats, histogram math, rates. */
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

static struct kvmstats_ctx *ctx;
static struct kvmstats_schema *schema;

#define F(t, u, b) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, KVMSTATS_BASE_##b)

static const struct kvmstats_encode_desc descs[] = {
	{ "ns", F(CUMULATIVE, SECONDS, POW10), -9, 1, 0 },
	{ "kib", F(INSTANT, BYTES, POW2), 10, 1, 0 },
	{ "cycles", F(CUMULATIVE, CYCLES, POW10), 0, 1, 0 },
	{ "flag", F(INSTANT, BOOLEAN, POW10), 0, 1, 0 },
	{ "loghist", F(LOG_HIST, SECONDS, POW10), -9, 8, 0 },
	{ "linhist", F(LINEAR_HIST, NONE, POW10), 0, 4, 100 },
	{ "level", F(INSTANT, NONE, POW10), 0, 1, 0 },
};

static int setup(void **state)
{
	unsigned char *img;
	size_t len;

	(void)state;
	ctx = kvmstats_ctx__new(NULL);
	img = kvmstats_image__encode("kvm-1", descs, 7, NULL, &len, NULL);
	schema = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	return schema ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	kvmstats_schema__put(schema);
	kvmstats_ctx__free(ctx);
	return 0;
}

static const struct kvmstats_stat *stat(const char *name)
{
	const struct kvmstats_stat *st = kvmstats_schema__find(schema, name);

	assert_non_null(st);
	return st;
}

static void fmt(const char *name, double raw, const char *want)
{
	char buf[64];

	kvmstats_stat__format(stat(name), raw, buf, sizeof(buf));
	assert_string_equal(buf, want);
}

static void test_scale(void **state)
{
	(void)state;
	assert_true(fabs(kvmstats_stat__scale(stat("ns"), 1.25e9) - 1.25) < 1e-12);
	assert_true(kvmstats_stat__scale(stat("kib"), 3) == 3072);
	assert_true(kvmstats_stat__scale(stat("cycles"), 7) == 7);
}

static void test_format(void **state)
{
	(void)state;
	fmt("ns", 1.25e9, "1.25 s");
	fmt("ns", 3.5e6, "3.5 ms");
	fmt("ns", 0, "0 s");
	fmt("ns", 120e9, "2.00 min");
	fmt("kib", 1024, "1 MiB");
	fmt("kib", 1, "1 KiB");
	fmt("flag", 1, "yes");
	fmt("flag", 0, "no");
	fmt("level", 1024, "1.02 k");
	fmt("level", 512, "512");
	fmt("cycles", 5, "5 cycles");
}

static void test_log_buckets(void **state)
{
	const struct kvmstats_stat *st = stat("loghist");
	double lo, hi;

	(void)state;
	/* The kernel puts v in bucket fls64(v). */
	assert_int_equal(kvmstats_hist__bucket_bounds(st, 0, &lo, &hi), 0);
	assert_true(lo == 0 && hi == 1);
	kvmstats_hist__bucket_bounds(st, 1, &lo, &hi);
	assert_true(lo == 1 && hi == 2);
	kvmstats_hist__bucket_bounds(st, 5, &lo, &hi);
	assert_true(lo == 16 && hi == 32);
	kvmstats_hist__bucket_bounds(st, 7, &lo, &hi);
	assert_true(lo == 64 && isinf(hi));
	assert_int_equal(kvmstats_hist__bucket_bounds(st, 8, &lo, &hi), -ERANGE);
}

static void test_linear_buckets(void **state)
{
	const struct kvmstats_stat *st = stat("linhist");
	double lo, hi;

	(void)state;
	kvmstats_hist__bucket_bounds(st, 2, &lo, &hi);
	assert_true(lo == 200 && hi == 300);
	kvmstats_hist__bucket_bounds(st, 3, &lo, &hi);
	assert_true(lo == 300 && isinf(hi));
	assert_int_equal(kvmstats_hist__bucket_bounds(stat("ns"), 0, &lo, &hi),
			 -EINVAL);
}

static void test_quantiles(void **state)
{
	const struct kvmstats_stat *lin = stat("linhist");
	const struct kvmstats_stat *lg = stat("loghist");
	uint64_t b[4] = { 10, 10, 0, 0 };
	uint64_t l[8] = { 0, 0, 0, 0, 100, 0, 0, 0 };
	uint64_t empty[8] = { 0 };
	uint64_t last[4] = { 0, 0, 0, 5 };

	(void)state;
	assert_int_equal(kvmstats_hist__count(lin, b), 20);
	/* 50% of 20 = rank 10: the end of bucket 0. */
	assert_true(fabs(kvmstats_hist__quantile(lin, b, 0.5) - 100) < 1e-9);
	assert_true(fabs(kvmstats_hist__quantile(lin, b, 0.75) - 150) < 1e-9);
	/* All in [8,16): p50 interpolates to 12. */
	assert_true(fabs(kvmstats_hist__quantile(lg, l, 0.5) - 12) < 1e-9);
	assert_true(isnan(kvmstats_hist__quantile(lg, empty, 0.5)));
	/* The open last bucket reports its floor. */
	assert_true(kvmstats_hist__quantile(lin, last, 0.99) == 300);
	assert_true(isnan(kvmstats_hist__quantile(lin, b, 1.5)));
}

/* Raw values are integers: a log2 bucket 0 holds exactly 0 and bucket 1
 * exactly 1, so a quantile there is that value, not a point inside
 * [0, 1) or [1, 2) ("0.5 ns" for a histogram of zeros). */
static void test_quantile_one_value_buckets(void **state)
{
	const struct kvmstats_stat *lg = stat("loghist");
	uint64_t zeros[8] = { 7, 0, 0, 0, 0, 0, 0, 0 };
	uint64_t ones[8] = { 0, 3, 0, 0, 0, 0, 0, 0 };
	uint64_t mixed[8] = { 50, 0, 50, 0, 0, 0, 0, 0 };
	char buf[32];

	(void)state;
	assert_true(kvmstats_hist__quantile(lg, zeros, 0.5) == 0);
	assert_true(kvmstats_hist__quantile(lg, zeros, 0.99) == 0);
	assert_true(kvmstats_hist__quantile(lg, zeros, 0) == 0);
	kvmstats_stat__format(lg, kvmstats_hist__quantile(lg, zeros, 0.5), buf,
			      sizeof(buf));
	assert_string_equal(buf, "0 s");
	assert_true(kvmstats_hist__quantile(lg, ones, 0.5) == 1);
	/* Half zeros, half in [2, 4): p25 is 0, p75 interpolates in [2, 4). */
	assert_true(kvmstats_hist__quantile(lg, mixed, 0.25) == 0);
	assert_true(kvmstats_hist__quantile(lg, mixed, 0.5) == 0);
	assert_true(fabs(kvmstats_hist__quantile(lg, mixed, 0.75) - 3) < 1e-9);
}

/* Buckets whose sum passes 2^64 (a hostile image, a corrupt log, years
 * of a busy counter): the count saturates instead of wrapping to a small
 * number, and the quantiles still rank against the true total. */
static void test_hist_count_overflow(void **state)
{
	const struct kvmstats_stat *lg = stat("loghist");
	const struct kvmstats_stat *lin = stat("linhist");
	uint64_t full[8], half[4] = { UINT64_MAX, UINT64_MAX, 0, 0 };
	uint64_t edge[4] = { UINT64_MAX - 1, 1, 0, 0 };

	(void)state;
	for (int i = 0; i < 8; i++)
		full[i] = UINT64_MAX;
	assert_true(kvmstats_hist__count(lg, full) == UINT64_MAX);
	assert_true(kvmstats_hist__count(lin, half) == UINT64_MAX);
	assert_true(kvmstats_hist__count(lin, edge) == UINT64_MAX);
	/* 8 equal buckets: the median is the top of bucket 3, [4, 8). */
	assert_true(fabs(kvmstats_hist__quantile(lg, full, 0.5) - 8) < 1e-6);
	assert_true(kvmstats_hist__quantile(lg, full, 0.01) == 0);
	/* Two equal full buckets of 100 wide: p75 is half way into the second. */
	assert_true(fabs(kvmstats_hist__quantile(lin, half, 0.75) - 150) < 1e-6);
	assert_true(fabs(kvmstats_hist__quantile(lin, half, 0.25) - 50) < 1e-6);
}

static void test_rate_and_delta(void **state)
{
	size_t n = kvmstats_schema__data_size(schema) / 8;
	uint64_t *a = calloc(n, 8), *b = calloc(n, 8), out[8];
	const struct kvmstats_stat *ns = stat("ns"), *lg = stat("loghist");

	(void)state;
	a[kvmstats_stat__offset(ns) / 8] = 1000;
	b[kvmstats_stat__offset(ns) / 8] = 3000;
	assert_true(kvmstats_stat__rate(ns, a, b, 2000000000ull) == 1000);
	/* Levels have no rate; counters that go down neither. */
	assert_true(isnan(kvmstats_stat__rate(stat("level"), a, b, 1000)));
	assert_true(isnan(kvmstats_stat__rate(ns, b, a, 1000)));
	assert_true(isnan(kvmstats_stat__rate(ns, a, b, 0)));
	a[kvmstats_stat__offset(lg) / 8 + 3] = 5;
	b[kvmstats_stat__offset(lg) / 8 + 3] = 9;
	b[kvmstats_stat__offset(lg) / 8 + 1] = 2;
	kvmstats_hist__delta(lg, a, b, out);
	assert_int_equal(out[3], 4);
	assert_int_equal(out[1], 2);
	assert_int_equal(out[0], 0);
	free(a);
	free(b);
}

/* The name kvmstats_proc__name() gives a real process whose command line
 * holds `-name ARG`: a shell blocked in `read`, so that its command line
 * stays as it was exec'ed. */
static void name_of(const char *arg, const char *want)
{
	char name[64] = "", cmd[64];
	int p[2], st;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(p[0], 0);
		close(p[1]);
		execl("/bin/sh", "sh", "-c", "read x", "-name", arg, (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	/* Until the exec: its command line is then the shell's. */
	snprintf(cmd, sizeof(cmd), "/proc/%d/cmdline", (int)pid);
	for (int i = 0; i < 500; i++) {
		FILE *f = fopen(cmd, "re");
		char first[4] = "";

		if (f && fread(first, 1, 3, f) == 3 && !memcmp(first, "sh", 3)) {
			fclose(f);
			break;
		}
		if (f)
			fclose(f);
		usleep(10000);
	}
	assert_int_equal(kvmstats_proc__name(pid, name, sizeof(name)), 0);
	close(p[1]);
	waitpid(pid, &st, 0);
	assert_string_equal(name, want);
}

/* QEMU's option syntax: ",," is a literal comma, "guest" the implied key
 * of the first parameter, "guest=" anywhere, the last one wins. */
static void test_qemu_names(void **state)
{
	(void)state;
	name_of("guest=a,,b", "a,b");
	name_of("a,,b,debug-threads=on", "a,b");
	name_of("web,,1,,,debug-threads=on", "web,1,");
	name_of("x,,y=z", "x,y=z");
	name_of("debug-threads=on,guest=vm1", "vm1");
	name_of("guest=old,guest=new", "new");
	name_of("plain", "plain");
	name_of("plain,debug-threads", "plain");
	/* No name in it: the process's comm. */
	name_of("debug-threads=on", "sh");
	name_of("guest=", "sh");
	name_of("", "sh");
}

static void test_fd_kinds(void **state)
{
	int idx = 99;

	(void)state;
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vm", &idx), KVMSTATS_FD_VM);
	assert_int_equal(idx, -1);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vm-stats", &idx),
			 KVMSTATS_FD_VM_STATS);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vcpu:3", &idx),
			 KVMSTATS_FD_VCPU);
	assert_int_equal(idx, 3);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vcpu-stats:17", &idx),
			 KVMSTATS_FD_VCPU_STATS);
	assert_int_equal(idx, 17);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vcpu-stats:x", &idx),
			 KVMSTATS_FD_OTHER);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vmx", &idx),
			 KVMSTATS_FD_OTHER);
	assert_int_equal(kvmstats_fd_kind("/dev/kvm", &idx), KVMSTATS_FD_OTHER);
	assert_int_equal(kvmstats_fd_kind("anon_inode:kvm-vcpu:99999999999", &idx),
			 KVMSTATS_FD_OTHER);
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(kvmstats_type_str(KVMSTATS_TYPE_LOG_HIST), "log_hist");
	assert_string_equal(kvmstats_unit_str(KVMSTATS_UNIT_CYCLES), "cycles");
	assert_string_equal(kvmstats_base_str(KVMSTATS_BASE_POW2), "pow2");
	assert_string_equal(kvmstats_unit_str(12), "unknown");
	assert_non_null(kvmstats_version_string());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scale),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_log_buckets),
		cmocka_unit_test(test_linear_buckets),
		cmocka_unit_test(test_quantiles),
		cmocka_unit_test(test_quantile_one_value_buckets),
		cmocka_unit_test(test_hist_count_overflow),
		cmocka_unit_test(test_rate_and_delta),
		cmocka_unit_test(test_fd_kinds),
		cmocka_unit_test(test_qemu_names),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests_name("value", tests, setup, teardown);
}
