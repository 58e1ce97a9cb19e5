// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The migration settings (names, values, defaults per QEMU version, the
 * options over QEMU's), the multifd model's accounting per version, and
 * how `follow` reads QEMU's query-migrate; QEMU's version as its
 * executable names it.
 */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "unit.h"
#include "../../lib/mem_internal.h"
#include "kvmstats_follow.h"
#ifdef HAVE_LIBVIRT
#include "../../lib/follow_libvirt.h"
#endif

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(kvmstats_mig_key_str(KVMSTATS_MIG_CHANNELS), "multifd-channels");
	assert_string_equal(kvmstats_mig_key_str(KVMSTATS_MIG_NKEYS), "unknown");
	assert_string_equal(kvmstats_mig_src_str(KVMSTATS_MIG_SRC_OPTION), "option");
	assert_int_equal(kvmstats_mig_compress_parse("zstd"), KVMSTATS_MIG_COMPRESS_ZSTD);
	assert_int_equal(kvmstats_mig_compress_parse("zlib"), KVMSTATS_MIG_COMPRESS_ZLIB);
	/* "other" names what QEMU has and we do not model: not an option. */
	assert_int_equal(kvmstats_mig_compress_parse("other"), -EINVAL);
	assert_int_equal(kvmstats_mig_compress_parse("lz4"), -EINVAL);
	assert_int_equal(kvmstats_mig_compress_parse(NULL), -EINVAL);
}

static void test_defaults_and_overrides(void **state)
{
	struct kvmstats_migrate_settings s = { .qemu_major = 10 };
	struct kvmstats_migrate_overrides o = {
		.sz = sizeof(o), .compress = KVMSTATS_MIG_COMPRESS_ZSTD,
		.auto_converge = -1, .postcopy = 1,
	};
	char v[32];

	(void)state;
	ks_migrate_defaults(&s);
	assert_int_equal(s.qemu_major, 10);
	assert_true(fabs(s.bandwidth - 134217728.0) < 1);
	assert_int_equal(s.channels, 2);
	assert_int_equal(s.zero_detect, KVMSTATS_MIG_ZERO_MULTIFD);
	assert_int_equal(s.src[KVMSTATS_MIG_BANDWIDTH], KVMSTATS_MIG_SRC_DEFAULT);
	/* --compressed alone turns multifd on, like virsh's. */
	ks_migrate_override(&s, &o);
	assert_true(s.multifd);
	assert_int_equal(s.src[KVMSTATS_MIG_MULTIFD], KVMSTATS_MIG_SRC_OPTION);
	assert_int_equal(s.src[KVMSTATS_MIG_CHANNELS], KVMSTATS_MIG_SRC_DEFAULT);
	assert_true(s.postcopy);
	assert_false(s.auto_converge);
	assert_int_equal(s.src[KVMSTATS_MIG_AUTO_CONVERGE], KVMSTATS_MIG_SRC_DEFAULT);
	kvmstats_migrate_settings__value(&s, KVMSTATS_MIG_COMPRESSION, v, sizeof(v));
	assert_string_equal(v, "zstd");
	kvmstats_migrate_settings__value(&s, KVMSTATS_MIG_DOWNTIME, v, sizeof(v));
	assert_string_equal(v, "300");
	/* Before 9.0 zero pages are found in the migration thread. */
	s.qemu_major = 7;
	ks_migrate_defaults(&s);
	assert_int_equal(s.zero_detect, KVMSTATS_MIG_ZERO_LEGACY);
	/* Post-copy's limit: QEMU's unlimited until an option says. */
	assert_true(s.postcopy_bw == 0);
	assert_true(fabs(ks_postcopy_bandwidth(&s, 1e6) - 1e6) < 1);
	o.postcopy_bw = 8e9 / 8;
	ks_migrate_override(&s, &o);
	assert_int_equal(s.src[KVMSTATS_MIG_POSTCOPY_BW], KVMSTATS_MIG_SRC_OPTION);
	assert_true(fabs(ks_postcopy_bandwidth(&s, 1e6) - 1e9) < 1);
}

/* 7.2 counts multifd pages uncompressed; 10.0 counts what was sent, and
 * its zero pages are offsets in packets. */
static void test_multifd_accounting(void **state)
{
	struct kvmstats_compress_estimate c = { .valid = true, .ratio = 0.01 };
	struct ks_mig_pages pg = { .zero = 1280, .normal = 1280, .blocks = 1 };
	struct kvmstats_migrate_settings s7 = { .qemu_major = 7, .qemu_minor = 2 };
	struct kvmstats_migrate_settings s10 = { .qemu_major = 10 };
	double rep, wire;

	(void)state;
	ks_migrate_defaults(&s7);
	ks_migrate_defaults(&s10);
	s7.multifd = s10.multifd = true;
	s7.channels = s10.channels = 4;
	s7.bandwidth = s10.bandwidth = 32 << 20;
	ks_multifd_pass(&s7, &c, &pg, &rep, &wire);
	/* 10 packets of 1344 bytes, 1280 x 4096 counted, zero pages 9 bytes. */
	assert_true(fabs(rep - (1280 * 9 + 10 * 1344 + 1280 * 4096.0 + 8)) < 1);
	assert_true(wire < rep / 10);
	ks_multifd_pass(&s10, &c, &pg, &rep, &wire);
	/* 20 packets (zero pages in them too), the compressed pages. */
	assert_true(fabs(rep - (20 * 1344 + 1280 * 4096 * 0.01 + 8)) < 1);
	assert_true(fabs(rep - wire) < 1);
	/* Packets in flight exceed the limit from 8.x on, by up to 4. */
	assert_true(ks_multifd_bandwidth(&s10, s10.bandwidth, 0, 4) >
		    ks_multifd_bandwidth(&s7, s7.bandwidth, 0, 0));
	s10.channels = 16;
	assert_int_equal(ks_multifd_inflight(&s10), 4);
	/* 7 packets of 128 pages cross a budget of 3.2 MiB, then 0 to 4. */
	assert_true(fabs(ks_multifd_window(&s10, s10.bandwidth, 0) - 7 * 525632.0) < 1);
	assert_true(fabs(ks_multifd_window(&s10, s10.bandwidth, 4) - 11 * 525632.0) < 1);
	assert_true(fabs(ks_multifd_bandwidth(&s10, s10.bandwidth, 0, 4) - 9 * 5256320.0) < 1);
}

/* follow: what a query-migrate answer says about the migration. */
static enum kvmstats_migst status_of(const char *answer, uint64_t *total_ms)
{
	struct json_object *r = json_tokener_parse(answer);
	struct kvmstats_migration m;

	assert_non_null(r);
	ks_follow_take_info(&m, r);
	json_object_put(r);
	*total_ms = (m.have & KVMSTATS_MIGF_TOTAL_TIME) ? m.total_time_ms : UINT64_MAX;
	return m.status;
}

static void test_follow_completed(void **state)
{
	uint64_t ms;

	(void)state;
	assert_int_equal(status_of("{\"status\":\"completed\",\"total-time\":1740,"
				   "\"downtime\":31,\"setup-time\":2}", &ms),
			 KVMSTATS_MIGST_COMPLETED);
	assert_int_equal(ms, 1740);
	/* QEMU 7.2, between its "completed" and its accounting. */
	assert_int_equal(status_of("{\"status\":\"completed\",\"total-time\":0,"
				   "\"downtime\":0,\"setup-time\":2}", &ms),
			 KVMSTATS_MIGST_ACTIVE);
	/* A VM that came in by migration, its own under way. */
	assert_int_equal(status_of("{\"status\":\"completed\",\"total-time\":900,"
				   "\"expected-downtime\":300}", &ms),
			 KVMSTATS_MIGST_ACTIVE);
	assert_int_equal(status_of("{\"status\":\"active\",\"total-time\":900,"
				   "\"expected-downtime\":300}", &ms),
			 KVMSTATS_MIGST_ACTIVE);
	assert_int_equal(ms, 900);
}

static struct kvmstats_migration reading(enum kvmstats_migst st, uint64_t ms,
					 uint64_t bytes)
{
	struct kvmstats_migration m = {
		.status = st, .total_time_ms = ms, .transferred = bytes};

	return m;
}

/* follow's base: an ended migration shown at the first look is not a new
 * one until its status or figures change. */
static void test_follow_base(void **state)
{
	struct kvmstats_migration done =
		reading(KVMSTATS_MIGST_COMPLETED, 1740, 5 << 20);
	struct kvmstats_migration m;
	struct kvmstats_migbase b = {0};

	(void)state;
	/* No base yet: every migration but none is new. */
	assert_true(kvmstats_migbase__is_new(&b, &done));
	m = reading(KVMSTATS_MIGST_NONE, 0, 0);
	assert_false(kvmstats_migbase__is_new(&b, &m));

	/* The last migration's, still shown. */
	kvmstats_migbase__set(&b, &done);
	assert_true(b.set);
	assert_int_equal(b.status, KVMSTATS_MIGST_COMPLETED);
	assert_int_equal(b.total_time_ms, 1740);
	assert_int_equal(b.transferred, 5 << 20);
	assert_false(kvmstats_migbase__is_new(&b, &done));
	/* Another one under way, or ended with other figures or status. */
	m = reading(KVMSTATS_MIGST_ACTIVE, 1740, 5 << 20);
	assert_true(kvmstats_migbase__is_new(&b, &m));
	m = reading(KVMSTATS_MIGST_COMPLETED, 1741, 5 << 20);
	assert_true(kvmstats_migbase__is_new(&b, &m));
	m = reading(KVMSTATS_MIGST_COMPLETED, 1740, (5 << 20) + 1);
	assert_true(kvmstats_migbase__is_new(&b, &m));
	/* Failed between two polls: its status alone tells it. */
	m = reading(KVMSTATS_MIGST_FAILED, 1740, 5 << 20);
	assert_true(kvmstats_migbase__is_new(&b, &m));

	/* A first look at no ended migration: "none", any end is new. */
	m = reading(KVMSTATS_MIGST_ACTIVE, 300, 1 << 20);
	kvmstats_migbase__set(&b, &m);
	assert_true(b.set);
	assert_int_equal(b.status, KVMSTATS_MIGST_ACTIVE);
	assert_int_equal(b.total_time_ms, UINT64_MAX);
	assert_int_equal(b.transferred, UINT64_MAX);
	assert_true(kvmstats_migbase__is_new(&b, &done));
	m = reading(KVMSTATS_MIGST_CANCELLED, UINT64_MAX, UINT64_MAX);
	assert_true(kvmstats_migbase__is_new(&b, &m));
	m = reading(KVMSTATS_MIGST_NONE, 0, 0);
	kvmstats_migbase__set(&b, &m);
	assert_int_equal(b.total_time_ms, UINT64_MAX);
	assert_false(kvmstats_migbase__is_new(&b, &m));
	assert_true(kvmstats_migbase__is_new(&b, &done));
}

static void assert_version_in(const char *text, int err, unsigned int maj,
			      unsigned int min)
{
	unsigned int a = 0, b = 0;

	assert_int_equal(ks_version_in(text, strlen(text), &a, &b), err);
	assert_int_equal(a, maj);
	assert_int_equal(b, min);
}

/* The string QEMU prints for --version, found whole in any bytes, never
 * half of it. */
static void test_exe_version_in(void **state)
{
	(void)state;
	assert_version_in("\x7f" "ELF..QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-1)",
			  0, 10, 0);
	assert_version_in("QEMU emulator version 7.2.22 (Debian)", 0, 7, 2);
	/* A bad one first, then the real one. */
	assert_version_in("QEMU emulator version %s\nQEMU emulator version 9.2.0", 0, 9, 2);
	/* Cut at the buffer's end: not "10.1" of a "10.12". */
	assert_version_in("QEMU emulator version 10.1", -ENOENT, 0, 0);
	assert_version_in("QEMU emulator version 10.", -ENOENT, 0, 0);
	assert_version_in("QEMU emulator version 10", -ENOENT, 0, 0);
	/* Numbers no QEMU has. */
	assert_version_in("QEMU emulator version 0.15.1 ", -ENOENT, 0, 0);
	assert_version_in("QEMU emulator version 12345.1 ", -ENOENT, 0, 0);
	assert_version_in("QEMU emulator version 1.12345 ", -ENOENT, 0, 0);
	assert_version_in("qemu-system-x86_64 version 10.0.0 ", -ENOENT, 0, 0);
	assert_version_in("", -ENOENT, 0, 0);
}

/* A file of 3 MiB read in chunks of 1 MiB: a string across two chunks
 * is found, one cut by the file's end is not. */
static void test_exe_version_scan(void **state)
{
	static const char v[] = "QEMU emulator version 10.0.13 (Debian)";
	const size_t mib = 1u << 20;
	unsigned int maj = 0, min = 0;
	char *buf = calloc(1, 3 * mib);
	int fd = memfd_create("qemu", 0);

	(void)state;
	assert_non_null(buf);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, 3 * mib, 0), (ssize_t)(3 * mib));
	assert_int_equal(ks_exe_version_scan(fd, UINT64_MAX, &maj, &min), -ENOENT);
	/* The prefix ends 3 bytes before the second chunk: found whole. */
	assert_int_equal(pwrite(fd, v, sizeof(v) - 1, 2 * mib - 25), (ssize_t)sizeof(v) - 1);
	assert_int_equal(ks_exe_version_scan(fd, UINT64_MAX, &maj, &min), 0);
	assert_int_equal(maj, 10);
	assert_int_equal(min, 0);
	/* At the very end of the file, its minor cut: not found. */
	assert_int_equal(pwrite(fd, buf, mib, 2 * mib - mib / 2), (ssize_t)mib);
	assert_int_equal(pwrite(fd, v, 25, 3 * mib - 25), 25);
	maj = min = 0;
	assert_int_equal(ks_exe_version_scan(fd, UINT64_MAX, &maj, &min), -ENOENT);
	/* Past the deadline: said, after the first chunk. */
	assert_int_equal(ks_exe_version_scan(fd, 0, &maj, &min), -ETIMEDOUT);
	close(fd);
	free(buf);
}

#ifdef HAVE_LIBVIRT
/* libvirt's job parameters onto the reading query-migrate fills: what
 * libvirt gives, converted; what it does not, unknown. */
static void test_follow_libvirt_params(void **state)
{
	virTypedParameterPtr p = NULL;
	struct kvmstats_migration m;
	int n = 0, max = 0;

	(void)state;
	/* libvirt's per-thread error state, which these calls reset. */
	assert_int_equal(virInitialize(), 0);
	virTypedParamsAddULLong(&p, &n, &max, VIR_DOMAIN_JOB_TIME_ELAPSED, 9453);
	virTypedParamsAddULLong(&p, &n, &max, VIR_DOMAIN_JOB_MEMORY_PROCESSED,
				9026838);
	virTypedParamsAddULLong(&p, &n, &max, VIR_DOMAIN_JOB_DOWNTIME, 163);
	virTypedParamsAddULLong(&p, &n, &max, VIR_DOMAIN_JOB_MEMORY_BPS,
				4166541);
	virTypedParamsAddULLong(&p, &n, &max, VIR_DOMAIN_JOB_MEMORY_ITERATION, 3);
	virTypedParamsAddInt(&p, &n, &max, VIR_DOMAIN_JOB_AUTO_CONVERGE_THROTTLE,
			     20);
	virTypedParamsAddString(&p, &n, &max, VIR_DOMAIN_JOB_ERRMSG,
				"bad\x1b[2Jthing");
	ks_follow_lv_take(&m, VIR_DOMAIN_JOB_COMPLETED, p, n);
	assert_int_equal(m.status, KVMSTATS_MIGST_COMPLETED);
	assert_string_equal(m.status_name, "completed");
	/* libvirt's job time, not QEMU's total-time (ks_follow_lv_lead). */
	assert_int_equal(m.job_time_ms, 9453);
	assert_false(m.have & KVMSTATS_MIGF_TOTAL_TIME);
	assert_int_equal(m.transferred, 9026838);
	assert_int_equal(m.dirty_sync_count, 3);
	assert_int_equal(m.throttle_percent, 20);
	/* Once ended, libvirt's downtime is the real one. */
	assert_true(m.have & KVMSTATS_MIGF_DOWNTIME);
	assert_false(m.have & KVMSTATS_MIGF_EXPECTED_DOWNTIME);
	assert_int_equal(m.downtime_ms, 163);
	assert_true(fabs(m.mbps - 33.332328) < 1e-6);
	assert_string_equal(m.error, "bad?[2Jthing");
	assert_false(m.have & (KVMSTATS_MIGF_REMAINING | KVMSTATS_MIGF_TOTAL |
			       KVMSTATS_MIGF_PRECOPY_BYTES |
			       KVMSTATS_MIGF_POSTCOPY_BYTES |
			       KVMSTATS_MIGF_SETUP_TIME));
	/* While it runs the downtime is the expected one. */
	ks_follow_lv_take(&m, VIR_DOMAIN_JOB_UNBOUNDED, p, n);
	assert_int_equal(m.status, KVMSTATS_MIGST_ACTIVE);
	assert_true(m.have & KVMSTATS_MIGF_EXPECTED_DOWNTIME);
	assert_false(m.have & KVMSTATS_MIGF_DOWNTIME);
	/* A completed job libvirt says did not succeed. */
	virTypedParamsAddBoolean(&p, &n, &max, VIR_DOMAIN_JOB_SUCCESS, 0);
	ks_follow_lv_take(&m, VIR_DOMAIN_JOB_COMPLETED, p, n);
	assert_int_equal(m.status, KVMSTATS_MIGST_FAILED);
	virTypedParamsFree(p, n);
}

/* A reading of a libvirt job: its status, job time and bytes sent (0:
 * not given, as before QEMU's migration began). */
static struct kvmstats_migration lv_reading(enum kvmstats_migst st,
					    uint64_t job_ms, uint64_t sent)
{
	struct kvmstats_migration m = {.status = st,
				       .have = KVMSTATS_MIGF_JOB_TIME,
				       .job_time_ms = job_ms};

	if (sent) {
		m.transferred = sent;
		m.have |= KVMSTATS_MIGF_TRANSFERRED;
	}
	return m;
}

static void assert_qemu_ms(struct ks_lv_lead *s, enum kvmstats_migst st,
			   uint64_t job_ms, uint64_t sent, int64_t want)
{
	struct kvmstats_migration m = lv_reading(st, job_ms, sent);

	ks_follow_lv_lead(s, &m);
	if (want < 0) {
		assert_false(m.have & KVMSTATS_MIGF_TOTAL_TIME);
		return;
	}
	assert_true(m.have & KVMSTATS_MIGF_TOTAL_TIME);
	assert_int_equal(m.total_time_ms, want);
}

/* QEMU's own time within libvirt's job: from the midpoint between the
 * last poll with nothing sent and the first with bytes; unknown without
 * both; a new job starts over. */
static void test_follow_libvirt_lead(void **state)
{
	struct kvmstats_migration m = {.status = KVMSTATS_MIGST_ACTIVE};
	struct ks_lv_lead s = {0};

	(void)state;
	/* Came late: the job already sends; QEMU's start is unknown. */
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 6000, 1000, -1);
	assert_qemu_ms(&s, KVMSTATS_MIGST_COMPLETED, 8900, 17400000, -1);
	/* A new job: 4.8 s of libvirt's phases, polls 0.2 s apart. */
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 200, 0, -1);
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 4800, 0, -1);
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 5000, 400000, 100);
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 7000, 8000000, 2100);
	assert_qemu_ms(&s, KVMSTATS_MIGST_COMPLETED, 8930, 17400000, 4030);
	/* The completed job read again keeps its time. */
	assert_qemu_ms(&s, KVMSTATS_MIGST_COMPLETED, 8930, 17400000, 4030);
	/* The next job is measured from its own start. */
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 1000, 0, -1);
	assert_qemu_ms(&s, KVMSTATS_MIGST_ACTIVE, 1400, 5000, 200);
	/* A reading without libvirt's job time is left as it is. */
	ks_follow_lv_lead(&s, &m);
	assert_int_equal(m.have, 0);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_defaults_and_overrides),
		cmocka_unit_test(test_multifd_accounting),
		cmocka_unit_test(test_follow_completed),
		cmocka_unit_test(test_follow_base),
		cmocka_unit_test(test_exe_version_in),
		cmocka_unit_test(test_exe_version_scan),
#ifdef HAVE_LIBVIRT
		cmocka_unit_test(test_follow_libvirt_params),
		cmocka_unit_test(test_follow_libvirt_lead),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
