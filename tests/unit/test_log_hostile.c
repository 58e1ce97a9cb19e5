// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The statistics log against hostile files and a hostile file system:
 * forged logs cost a bounded amount of time and memory and end with a
 * clear outcome; a sound record after a forged stretch is still found;
 * rewinding costs no memory; the writer never writes or truncates
 * through a planted link or into a planted file.
 */
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "kvmstats_log.h"
#include "../../lib/log_format.h"

#define F(t, u) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, 0)

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	{ "halt_exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	{ "halt_wait_hist", F(LOG_HIST, SECONDS), -9, 8, 0 },
};

static struct kvmstats_ctx *ctx;
static struct kvmstats_schema *schema;
static char dir[] = "/tmp/kvmstats-test-loghostile.XXXXXX";
static char path[160];

static int setup(void **state)
{
	unsigned char *img;
	size_t len;

	(void)state;
	ctx = kvmstats_ctx__new(NULL);
	img = kvmstats_image__encode("kvm-7/vcpu-0", descs, 3, NULL, &len, NULL);
	schema = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/log", dir);
	return schema ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[200];

	(void)state;
	kvmstats_schema__put(schema);
	kvmstats_ctx__free(ctx);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A sound log of @n samples of two targets; ends[k] is where sample k
 * ends. */
static void write_log(const char *p, int n, uint64_t *ends)
{
	struct kvmstats_log_writer *w;
	uint64_t data[16] = { 0 };

	unlink(p);
	w = kvmstats_log_writer__open(ctx, p, NULL);
	assert_non_null(w);
	for (int k = 0; k < n; k++) {
		assert_int_equal(kvmstats_log_writer__begin(w, 1000000000ull * (k + 1), 1), 0);
		for (int t = 0; t < 2; t++) {
			struct kvmstats_log_target tg = { .pid = 7, .uid = 1, .vcpu = t,
							  .name = "vm", .id = "kvm-7",
							  .source = "fd" };

			data[0] = (uint64_t)(k * 3 + t);
			assert_int_equal(kvmstats_log_writer__add(w, &tg, schema, data,
								  NULL, 0), 0);
		}
		assert_int_equal(kvmstats_log_writer__commit(w), 0);
		if (ends)
			ends[k] = kvmstats_log_writer__size(w);
	}
	assert_int_equal(kvmstats_log_writer__close(w), 0);
}

static unsigned char *slurp(const char *p, size_t *len)
{
	struct stat st;
	unsigned char *buf;
	int fd = open(p, O_RDONLY);

	assert_true(fd >= 0 && !fstat(fd, &st));
	*len = (size_t)st.st_size;
	buf = malloc(*len);
	assert_int_equal(read(fd, buf, *len), (ssize_t)*len);
	close(fd);
	return buf;
}

static void spit(const char *p, const void *a, size_t alen, const void *b,
		 size_t blen)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, a, alen), (ssize_t)alen);
	if (blen)
		assert_int_equal(write(fd, b, blen), (ssize_t)blen);
	close(fd);
}

/* A header claiming @len bytes with a CRC that does not match them. */
static void put_claim(unsigned char *p, uint32_t len)
{
	struct log_rec h = { .sync = REC_SYNC, .type = REC_SAMPLE, .len = len,
			     .crc = 0x12345678 };

	memcpy(p, &h, sizeof(h));
}

/* Samples read, and the reader's last answer. */
static int read_all(const char *p, int *last)
{
	struct kvmstats_log_reader *r = kvmstats_log_reader__open(ctx, p, NULL);
	int n = 0, ret;

	assert_non_null(r);
	while ((ret = kvmstats_log_reader__next(r)) == 1)
		n++;
	*last = ret;
	kvmstats_log_reader__close(r);
	return n;
}

/* 512 KiB of sync words, each claiming the rest of the file, between two
 * halves of a sound log: one pass over them (the old reader checked each
 * claim: minutes), and every sample after them is found. */
static void test_resync_is_linear(void **state)
{
	size_t len, flood = 512 << 10, cut;
	uint64_t ends[40];
	unsigned char *log, *buf;
	double t0;
	int last, n;

	(void)state;
	write_log(path, 40, ends);
	log = slurp(path, &len);
	cut = ends[19];
	buf = malloc(cut + flood);
	memcpy(buf, log, cut);
	for (size_t at = 0; at + 16 <= flood; at += 16)
		put_claim(buf + cut + at, (uint32_t)(len + flood - (cut + at) - 16));
	spit(path, buf, cut + flood, log + cut, len - cut);
	t0 = cpu_s();
	n = read_all(path, &last);
	assert_true(cpu_s() - t0 < 1.0);
	assert_int_equal(n, 40);
	assert_int_equal(last, 0);
	free(buf);
	free(log);
}

/* Sound small records, each followed by a claim of the rest of the file:
 * the reader gives up within its budget, with -EBADMSG. */
static void test_forged_file_gives_up(void **state)
{
	size_t big = 1 << 20, at = sizeof(struct log_file_hdr);
	unsigned char *buf = calloc(1, big);
	struct log_gone g = { .tid = 1 };
	double t0;
	int last;

	(void)state;
	log_file_hdr_init((struct log_file_hdr *)buf);
	while (at + 40 <= big) {
		struct log_rec h = { .sync = REC_SYNC, .type = REC_GONE, .len = 8 };

		memcpy(buf + at + 16, &g, sizeof(g));
		h.crc = log_rec_crc(&h, buf + at + 16);
		memcpy(buf + at, &h, sizeof(h));
		at += 24;
		put_claim(buf + at, (uint32_t)(big - at - 16));
		at += 16;
	}
	spit(path, buf, big, NULL, 0);
	t0 = cpu_s();
	assert_int_equal(read_all(path, &last), 0);
	assert_true(cpu_s() - t0 < 1.0);
	assert_int_equal(last, -EBADMSG);
	free(buf);
}

/* Peak RSS, in KiB, of a child that reads @p. */
static long child_rss(const char *p)
{
	struct rusage ru;
	int status, last;
	pid_t pid = fork();

	if (pid == 0) {
		read_all(p, &last);
		_exit(0);
	}
	assert_int_equal(wait4(pid, &status, 0, &ru), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return ru.ru_maxrss;
}

/* 2.5 KiB of sound records naming ids near 2^24 and a 1 MiB data block
 * (the old reader allocated 281 MB for it): memory follows the file. */
static void test_ids_cost_no_memory(void **state)
{
	unsigned char buf[2560] = { 0 }, rec[128] = { 0 };
	struct kvmstats_abi_header h = { .name_size = 8, .num_desc = 1, .id_offset = 24,
					 .desc_offset = 32, .data_offset = 56 };
	struct kvmstats_abi_desc d = { .flags = F(CUMULATIVE, NONE), .size = 1,
				       .offset = (1u << 20) - 8 };
	struct log_schema ls = { .sid = 0xffffffu, .data_size = 1u << 20,
				 .key_len = sizeof(h) + sizeof(d) + 8 };
	size_t at = sizeof(struct log_file_hdr);
	long base, rss;

	(void)state;
	log_file_hdr_init((struct log_file_hdr *)buf);
	memcpy(rec, &ls, sizeof(ls));
	memcpy(rec + sizeof(ls), &h, sizeof(h));
	memcpy(rec + sizeof(ls) + sizeof(h), &d, sizeof(d));
	memcpy(rec + sizeof(ls) + sizeof(h) + sizeof(d), "exits", 6);
	for (uint32_t i = 0; at + 16 + 64 <= sizeof(buf); i++) {
		struct log_rec rh = { .sync = REC_SYNC, .type = REC_SCHEMA, .len = 64 };

		if (i) {
			struct log_target t = { .tid = 0xffffffu - i, .sid = ls.sid,
						.name_len = 2, .id_len = 2,
						.source_len = 2 };

			memset(rec, 0, 64);
			memcpy(rec, &t, sizeof(t));
			memcpy(rec + sizeof(t), "a\0b\0c", 6);
			rh.type = REC_TARGET;
		}
		memcpy(buf + at + 16, rec, 64);
		rh.crc = log_rec_crc(&rh, buf + at + 16);
		memcpy(buf + at, &rh, sizeof(rh));
		at += 16 + 64;
	}
	spit(path, buf, sizeof(buf), NULL, 0);
	rss = child_rss(path);
	write_log(path, 3, NULL);
	base = child_rss(path);
	assert_true(rss < base + 8192);
}

/* The same file read again after a rewind gives the same targets, and
 * costs nothing more, however many times. */
static void test_rewind_keeps_memory(void **state)
{
	const struct kvmstats_log_target *first[2] = { NULL, NULL };
	struct kvmstats_log_reader *r;
	size_t before = 0;

	(void)state;
	write_log(path, 30, NULL);
	r = kvmstats_log_reader__open(ctx, path, NULL);
	assert_non_null(r);
	for (int pass = 0; pass < 200; pass++) {
		int n = 0;

		while (kvmstats_log_reader__next(r) == 1) {
			for (size_t e = 0; e < 2; e++) {
				const struct kvmstats_log_entry *en =
					kvmstats_log_reader__entry(r, e);

				if (!first[e])
					first[e] = en->target;
				assert_ptr_equal(en->target, first[e]);
			}
			n++;
		}
		assert_int_equal(n, 30);
		/* (after the allocator has settled) */
		if (pass == 10)
			before = mallinfo2().uordblks;
		assert_int_equal(kvmstats_log_reader__rewind(r), 0);
	}
	assert_true(mallinfo2().uordblks <= before);
	kvmstats_log_reader__close(r);
}

static bool file_is(const char *p, const char *text)
{
	char buf[256] = "";
	int fd = open(p, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	return n >= 0 && !strcmp(buf, text);
}

/* A link planted where the log goes is never written through, nor is a
 * file that is not a log, even when asked to truncate; a rotation renames
 * over planted links without touching what they point to. */
static void test_writer_never_follows(void **state)
{
	char victim[200], p1[200];
	struct kvmstats_log_writer *w;
	uint64_t data[16] = { 0 };
	struct stat st;

	(void)state;
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(p1, sizeof(p1), "%s.1", path);
	spit(victim, "precious\n", 9, NULL, 0);
	unlink(path);
	assert_int_equal(symlink(victim, path), 0);
	assert_null(kvmstats_log_writer__open(ctx, path, NULL));
	assert_int_equal(errno, ELOOP);
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = KVMSTATS_LOG_TRUNCATE,
		      .rotate_size = 1, .rotate_keep = 2);
	assert_null(kvmstats_log_writer__open(ctx, path, &o));
	assert_int_equal(errno, ELOOP);
	assert_true(file_is(victim, "precious\n"));

	/* A file that is not a log is left alone, truncation asked or not. */
	unlink(path);
	spit(path, "mine\n", 5, NULL, 0);
	assert_null(kvmstats_log_writer__open(ctx, path, &o));
	assert_int_equal(errno, EINVAL);
	assert_true(file_is(path, "mine\n"));

	/* Rotation over planted links. */
	unlink(path);
	assert_int_equal(symlink(victim, p1), 0);
	w = kvmstats_log_writer__open(ctx, path, &o);
	assert_non_null(w);
	for (int k = 0; k < 3; k++) {
		struct kvmstats_log_target tg = { .pid = 7, .uid = 1, .name = "vm",
						  .id = "kvm-7", .source = "fd" };

		assert_int_equal(kvmstats_log_writer__begin(w, 1000 + k, 1), 0);
		assert_int_equal(kvmstats_log_writer__add(w, &tg, schema, data, NULL, 0), 0);
		assert_int_equal(kvmstats_log_writer__commit(w), 0);
	}
	assert_true(kvmstats_log_writer__rotations(w) >= 2);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	assert_true(file_is(victim, "precious\n"));
	assert_int_equal(lstat(p1, &st), 0);
	assert_true(S_ISREG(st.st_mode));
}

/* In a sticky directory anyone can write to, a file someone else made at
 * the log's path is not ours to write (root only: it takes a chown). */
static void test_writer_refuses_planted_file(void **state)
{
	char shared[200], p[240];
	int fd;

	(void)state;
	if (geteuid() != 0)
		skip();
	snprintf(shared, sizeof(shared), "%s/shared", dir);
	assert_int_equal(mkdir(shared, 01777), 0);
	assert_int_equal(chmod(shared, 01777), 0);
	snprintf(p, sizeof(p), "%s/log", shared);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0666);
	assert_true(fd >= 0);
	assert_int_equal(fchown(fd, 65534, 65534), 0);
	close(fd);
	assert_null(kvmstats_log_writer__open(ctx, p, NULL));
	assert_int_equal(errno, EPERM);
	/* Our own file there is fine. */
	assert_int_equal(unlink(p), 0);
	write_log(p, 2, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resync_is_linear),
		cmocka_unit_test(test_forged_file_gives_up),
		cmocka_unit_test(test_ids_cost_no_memory),
		cmocka_unit_test(test_rewind_keeps_memory),
		cmocka_unit_test(test_writer_never_follows),
		cmocka_unit_test(test_writer_refuses_planted_file),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
