// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The statistics log: what the writer writes, the reader returns, byte for
 * byte, across targets that come and go, failed reads, key and delta
 * entries, rotation, reopening, damage and truncation at every offset;
 * an older version's file appended to in its own version.
 */
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <zlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "kvmstats_log.h"
#include "../../lib/log_format.h"

#define F(t, u, b) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, KVMSTATS_BASE_##b)

static const struct kvmstats_encode_desc vm_descs[] = {
	{ "remote_tlb_flush", F(CUMULATIVE, NONE, POW10), 0, 1, 0 },
	{ "mmu_shadow_zapped", F(CUMULATIVE, NONE, POW10), 0, 1, 0 },
	{ "pages_4k", F(INSTANT, NONE, POW10), 0, 1, 0 },
	{ "max_mmu_page_hash_collisions", F(PEAK, NONE, POW10), 0, 1, 0 },
};

static const struct kvmstats_encode_desc vcpu_descs[] = {
	{ "exits", F(CUMULATIVE, NONE, POW10), 0, 1, 0 },
	{ "halt_exits", F(CUMULATIVE, NONE, POW10), 0, 1, 0 },
	{ "halt_wait_ns", F(CUMULATIVE, SECONDS, POW10), -9, 1, 0 },
	{ "halt_wait_hist", F(LOG_HIST, SECONDS, POW10), -9, 8, 0 },
	{ "fpu_reload", F(CUMULATIVE, NONE, POW10), 0, 1, 0 },
	{ "guest_mode", F(INSTANT, NONE, POW10), 0, 1, 0 },
};

static struct kvmstats_ctx *ctx;
static struct kvmstats_schema *vm_schema, *vcpu_schema;
static char dir[] = "/tmp/kvmstats-test-log.XXXXXX";
static char path[128];

/* The targets of the synthetic host, and when each is present. */
struct tgt {
	uint64_t uid;
	pid_t pid;
	int vcpu;
	int from, to;	/* samples [from, to) */
};

static const struct tgt tgts[] = {
	{ 1, 100, -1, 0, 1000 },
	{ 1, 100, 0, 0, 1000 },
	{ 1, 100, 1, 0, 1000 },
	{ 1, 100, 2, 0, 10 },	/* hot-unplugged */
	{ 2, 200, -1, 5, 1000 },	/* a VMM that appears */
	{ 2, 200, 0, 5, 1000 },
};
#define NT (sizeof(tgts) / sizeof(tgts[0]))

static struct kvmstats_schema *tgt_schema(size_t j)
{
	return tgts[j].vcpu < 0 ? vm_schema : vcpu_schema;
}

static bool present(size_t j, int k)
{
	return k >= tgts[j].from && k < tgts[j].to;
}

/* Word i of target j at sample k: a third of the words move. */
static uint64_t value(size_t j, int k, size_t i)
{
	if (i % 3 == 0)
		return (uint64_t)k * (j + 1) * 7 + i;
	return i * 1000 + j;
}

static int error_of(size_t j, int k)
{
	return j == 1 && k % 5 == 4 ? -EIO : 0;
}

static bool has_missing(size_t j, int k)
{
	return j == 2 && k % 2 == 0;
}

static const uint64_t missing_bits[1] = { 1u << 1 };

static int setup(void **state)
{
	unsigned char *img;
	size_t len;

	(void)state;
	ctx = kvmstats_ctx__new(NULL);
	img = kvmstats_image__encode("kvm-100", vm_descs, 4, NULL, &len, NULL);
	vm_schema = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	img = kvmstats_image__encode("kvm-100/vcpu-0", vcpu_descs, 6, NULL, &len,
				     NULL);
	vcpu_schema = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	free(img);
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/log", dir);
	return vm_schema && vcpu_schema ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[160];

	(void)state;
	kvmstats_schema__put(vm_schema);
	kvmstats_schema__put(vcpu_schema);
	kvmstats_ctx__free(ctx);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct kvmstats_log_writer *open_writer(unsigned int flags,
					       uint64_t rotate, unsigned int keep,
					       unsigned int key)
{
	char why[256] = "";
	struct kvmstats_log_writer *w;
	KVMSTATS_OPTS(kvmstats_log_writer_opts, o, .flags = flags,
		      .rotate_size = rotate, .rotate_keep = keep,
		      .keyframe_interval = key, .retry_ms = 1,
		      .errbuf = why, .errbuf_sz = sizeof(why));

	w = kvmstats_log_writer__open(ctx, path, &o);
	if (!w)
		fail_msg("open %s: %s", path, why);
	return w;
}

/* Write sample k; returns the commit's result. */
static int write_sample(struct kvmstats_log_writer *w, int k)
{
	uint64_t data[64];

	assert_int_equal(kvmstats_log_writer__begin(w, 1000000000ull * (k + 1),
						    1700000000000000000ull + k),
			 0);
	for (size_t j = 0; j < NT; j++) {
		struct kvmstats_log_target t = {
			.pid = tgts[j].pid, .uid = tgts[j].uid, .vm = 0,
			.vcpu = tgts[j].vcpu, .name = j < 4 ? "alpha" : "beta",
			.id = tgts[j].vcpu < 0 ? "kvm-x" : "kvm-x/vcpu-n",
			.source = "fd",
		};
		struct kvmstats_schema *s = tgt_schema(j);
		int err = error_of(j, k);

		if (!present(j, k))
			continue;
		for (size_t i = 0; i < kvmstats_schema__data_size(s) / 8; i++)
			data[i] = value(j, k, i);
		assert_int_equal(kvmstats_log_writer__add(w, &t, s, err ? NULL : data,
							  has_missing(j, k) ? missing_bits : NULL,
							  err),
				 0);
	}
	return kvmstats_log_writer__commit(w);
}

static size_t find_target(const struct kvmstats_log_target *t)
{
	for (size_t j = 0; j < NT; j++)
		if (tgts[j].uid == t->uid && tgts[j].vcpu == t->vcpu)
			return j;
	fail_msg("unknown target uid %llu vcpu %d", (unsigned long long)t->uid,
		 t->vcpu);
	return 0;
}

/* The reader's current sample is sample k, exactly. */
static void check_sample(struct kvmstats_log_reader *r, int k)
{
	size_t want = 0;

	for (size_t j = 0; j < NT; j++)
		want += present(j, k);
	assert_int_equal(kvmstats_log_reader__time_ns(r), 1000000000ull * (k + 1));
	assert_int_equal(kvmstats_log_reader__realtime_ns(r),
			 1700000000000000000ull + k);
	assert_int_equal(kvmstats_log_reader__num_entries(r), want);
	for (size_t e = 0; e < want; e++) {
		const struct kvmstats_log_entry *en = kvmstats_log_reader__entry(r, e);
		size_t j = find_target(en->target);

		assert_true(present(j, k));
		assert_ptr_equal(en->schema, tgt_schema(j));
		assert_int_equal(en->target->pid, tgts[j].pid);
		assert_string_equal(en->target->name, j < 4 ? "alpha" : "beta");
		assert_string_equal(en->target->source, "fd");
		assert_int_equal(en->error, error_of(j, k));
		if (en->error) {
			assert_null(en->data);
			continue;
		}
		assert_non_null(en->data);
		for (size_t i = 0; i < kvmstats_schema__data_size(en->schema) / 8; i++)
			assert_int_equal(en->data[i], value(j, k, i));
		if (has_missing(j, k)) {
			assert_non_null(en->missing);
			assert_int_equal(en->missing[0], missing_bits[0]);
		} else {
			assert_null(en->missing);
		}
	}
}

static struct kvmstats_log_reader *open_reader(const char *p)
{
	char why[256] = "";
	KVMSTATS_OPTS(kvmstats_log_reader_opts, o, .errbuf = why,
		      .errbuf_sz = sizeof(why));
	struct kvmstats_log_reader *r = kvmstats_log_reader__open(ctx, p, &o);

	if (!r)
		fail_msg("open %s: %s", p, why);
	return r;
}

static void write_log(int n, unsigned int key, uint64_t *ends)
{
	struct kvmstats_log_writer *w;

	unlink(path);
	w = open_writer(KVMSTATS_LOG_TRUNCATE, 0, 0, key);
	for (int k = 0; k < n; k++) {
		assert_int_equal(write_sample(w, k), 0);
		if (ends)
			ends[k] = kvmstats_log_writer__size(w);
	}
	assert_int_equal(kvmstats_log_writer__samples(w), n);
	assert_int_equal(kvmstats_log_writer__dropped(w), 0);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
}

static void test_round_trip(void **state)
{
	unsigned int keys[] = { 0, 1, 3 };
	struct kvmstats_log_reader *r;

	(void)state;
	for (size_t ki = 0; ki < 3; ki++) {
		write_log(40, keys[ki], NULL);
		r = open_reader(path);
		for (int k = 0; k < 40; k++) {
			assert_int_equal(kvmstats_log_reader__next(r), 1);
			assert_int_equal(kvmstats_log_reader__session_start(r), k == 0);
			check_sample(r, k);
		}
		assert_int_equal(kvmstats_log_reader__next(r), 0);
		assert_int_equal(kvmstats_log_reader__torn_offset(r), -1);
		assert_int_equal(kvmstats_log_reader__corrupt(r), 0);
		/* Rewind and read again: the same first sample. */
		assert_int_equal(kvmstats_log_reader__rewind(r), 0);
		assert_int_equal(kvmstats_log_reader__next(r), 1);
		check_sample(r, 0);
		kvmstats_log_reader__close(r);
	}
}

/* Deltas make the log smaller: a third of the words move here, so a
 * delta is about half a key entry. */
static void test_deltas_are_small(void **state)
{
	uint64_t ends_key[40], ends_delta[40];

	(void)state;
	write_log(40, 1, ends_key);
	write_log(40, 0, ends_delta);
	assert_true(ends_delta[39] * 4 < ends_key[39] * 3);
}

static void copy_file(const char *from, const char *to, off_t len)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY), out;
	ssize_t n;

	assert_true(in >= 0);
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(out >= 0);
	while (len > 0 && (n = read(in, buf, (size_t)len < sizeof(buf) ? (size_t)len
								    : sizeof(buf))) > 0) {
		assert_int_equal(write(out, buf, (size_t)n), n);
		len -= n;
	}
	close(in);
	close(out);
}

/* Cut a small log at every byte: never a crash, every complete sample
 * read, nothing after it, and the torn tail reported. */
static void test_truncate_everywhere(void **state)
{
	uint64_t ends[12];
	char cut[160];
	struct stat st;

	(void)state;
	write_log(12, 4, ends);
	assert_int_equal(stat(path, &st), 0);
	snprintf(cut, sizeof(cut), "%s/cut", dir);
	for (off_t len = 0; len <= st.st_size; len++) {
		struct kvmstats_log_reader *r;
		int complete = 0, k = 0;

		while (complete < 12 && ends[complete] <= (uint64_t)len)
			complete++;
		copy_file(path, cut, len);
		r = kvmstats_log_reader__open(ctx, cut, NULL);
		if (len < 32) {
			/* Not even a file header. */
			assert_null(r);
			assert_int_equal(errno, EINVAL);
			continue;
		}
		assert_non_null(r);
		while (kvmstats_log_reader__next(r) == 1)
			check_sample(r, k++);
		assert_int_equal(k, complete);
		if (complete && (uint64_t)len == ends[complete - 1])
			assert_int_equal(kvmstats_log_reader__torn_offset(r), -1);
		if (kvmstats_log_reader__torn_offset(r) >= 0)
			assert_true(kvmstats_log_reader__torn_offset(r) >=
				    (int64_t)(complete ? ends[complete - 1] : 32));
		assert_int_equal(kvmstats_log_reader__corrupt(r), 0);
		kvmstats_log_reader__close(r);
	}
}

static void flip_byte(const char *p, off_t at)
{
	int fd = open(p, O_RDWR);
	unsigned char b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* A flipped bit fails the CRC: that sample is skipped, the ones after it
 * read again, and no entry ever carries a wrong value. */
static void test_crc_corruption(void **state)
{
	uint64_t ends[30];
	struct kvmstats_log_reader *r;
	int k = 0, got = 0;

	(void)state;
	write_log(30, 8, ends);
	flip_byte(path, (off_t)(ends[11] + (ends[12] - ends[11]) / 2));
	r = open_reader(path);
	while (kvmstats_log_reader__next(r) == 1) {
		uint64_t t = kvmstats_log_reader__time_ns(r);

		k = (int)(t / 1000000000ull) - 1;
		assert_int_not_equal(k, 12);
		/* Targets whose delta chain went through the lost sample read
		 * as errors until their next key entry; the rest are exact. */
		for (size_t e = 0; e < kvmstats_log_reader__num_entries(r); e++) {
			const struct kvmstats_log_entry *en =
				kvmstats_log_reader__entry(r, e);
			size_t j = find_target(en->target);

			if (en->error == -ENODATA && k > 12)
				continue;
			assert_int_equal(en->error, error_of(j, k));
			for (size_t i = 0; en->data &&
					   i < kvmstats_schema__data_size(en->schema) / 8;
			     i++)
				assert_int_equal(en->data[i], value(j, k, i));
		}
		got++;
	}
	assert_int_equal(got, 29);
	assert_int_equal(k, 29);
	assert_int_equal(kvmstats_log_reader__corrupt(r), 1);
	assert_int_equal(kvmstats_log_reader__corrupt_offset(r), (int64_t)ends[11]);
	assert_int_equal(kvmstats_log_reader__torn_offset(r), -1);
	kvmstats_log_reader__close(r);

	/* The file header is checked too. */
	flip_byte(path, 3);
	assert_null(kvmstats_log_reader__open(ctx, path, NULL));
	assert_int_equal(errno, EINVAL);
}

/* A second writer appends after the first; a lock keeps two apart; a
 * file that is not a log is never appended to. */
static void test_append_lock_and_foreign(void **state)
{
	struct kvmstats_log_writer *w, *w2;
	struct kvmstats_log_reader *r;
	int k = 0, sessions = 0;
	FILE *f;

	(void)state;
	write_log(6, 0, NULL);
	w = open_writer(0, 0, 0, 0);
	assert_null(kvmstats_log_writer__open(ctx, path, NULL));
	assert_int_equal(errno, EBUSY);
	for (int i = 6; i < 12; i++)
		assert_int_equal(write_sample(w, i), 0);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	r = open_reader(path);
	while (kvmstats_log_reader__next(r) == 1) {
		sessions += kvmstats_log_reader__session_start(r);
		check_sample(r, k++);
	}
	assert_int_equal(k, 12);
	assert_int_equal(sessions, 2);
	kvmstats_log_reader__close(r);

	f = fopen(path, "w");
	fputs("not a log at all, please keep me\n", f);
	fclose(f);
	w2 = kvmstats_log_writer__open(ctx, path, NULL);
	assert_null(w2);
	assert_int_equal(errno, EINVAL);
	assert_null(kvmstats_log_reader__open(ctx, path, NULL));
	assert_int_equal(errno, EINVAL);
}

static off_t file_size(const char *p)
{
	struct stat st;

	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

/* The log at path read back: samples 0 to @n - 1, each exact, and
 * @corrupt damaged records. */
static void read_back(int n, uint64_t corrupt)
{
	struct kvmstats_log_reader *r = open_reader(path);
	int k = 0;

	while (kvmstats_log_reader__next(r) == 1)
		check_sample(r, k++);
	assert_int_equal(k, n);
	assert_int_equal(kvmstats_log_reader__corrupt(r), corrupt);
	kvmstats_log_reader__close(r);
}

/* An empty log whose header says @version. */
static void write_header(uint32_t version)
{
	struct log_file_hdr h;
	int fd;

	log_file_hdr_init(&h);
	h.version = version;
	h.crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)&h,
				offsetof(struct log_file_hdr, crc));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
	close(fd);
}

/* A version 1 file (an older writer's) is appended to in version 1: its
 * header kept, no short entry (the file is as long as long entries make
 * it), every sample read back. A later version's file is refused. */
static void test_version1_append(void **state)
{
	struct kvmstats_log_writer *w;
	struct log_file_hdr h;
	uint64_t v2_size, v1_size;
	int fd;

	(void)state;
	write_log(20, 0, NULL);
	v2_size = (uint64_t)file_size(path);
	write_header(1);
	w = open_writer(0, 0, 0, 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(write_sample(w, i), 0);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	v1_size = (uint64_t)file_size(path);
	/* 16 bytes more for each entry past a target's first few. */
	assert_true(v1_size > v2_size + 16 * 19 * 3);
	fd = open(path, O_RDONLY);
	assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	assert_int_equal(h.version, 1);
	read_back(20, 0);

	write_header(KVMSTATS_LOG_VERSION + 1);
	assert_null(kvmstats_log_writer__open(ctx, path, NULL));
	assert_int_equal(errno, EPROTONOSUPPORT);
	assert_null(kvmstats_log_reader__open(ctx, path, NULL));
	assert_int_equal(errno, EPROTONOSUPPORT);
}

/* The last sample record of the log at @p: its offset (0: none). */
static size_t last_sample(const unsigned char *b, size_t len)
{
	size_t at = sizeof(struct log_file_hdr), last = 0;

	while (at + sizeof(struct log_rec) <= len) {
		const struct log_rec *h = (const void *)(b + at);

		if (h->type == REC_SAMPLE)
			last = at;
		at += sizeof(*h) + h->len;
	}
	return last;
}

/* A short entry made malformed, its record's CRC made right again: that
 * sample is damage (no crash, no value), every other one reads. */
static void tamper_short(uint32_t tid_xor, uint32_t len)
{
	unsigned char *b = malloc(1 << 20);
	struct log_entry_short *e = NULL;
	struct log_rec *h;
	size_t n, at;
	int fd;

	write_log(12, 0, NULL);
	fd = open(path, O_RDWR);
	n = (size_t)read(fd, b, 1 << 20);
	at = last_sample(b, n);
	assert_true(at > 0);
	h = (struct log_rec *)(b + at);
	/* Its first short delta. */
	for (size_t p = at + sizeof(*h) + sizeof(struct log_sample);
	     p < at + sizeof(*h) + h->len;) {
		struct log_entry_short *s = (void *)(b + p);

		if ((s->tid & ENTRY_SHORT) && (s->tid & ENTRY_SHORT_DELTA)) {
			e = s;
			break;
		}
		p += s->tid & ENTRY_SHORT
			     ? sizeof(*s) + s->len
			     : sizeof(struct log_entry) +
				       ((struct log_entry *)s)->len;
	}
	assert_non_null(e);
	e->tid ^= tid_xor;
	if (len)
		e->len = len;
	h->crc = log_rec_crc(h, h + 1);
	assert_int_equal(pwrite(fd, b, n, 0), (ssize_t)n);
	close(fd);
	read_back(11, 1);
	free(b);
}

static void test_short_entry_damage(void **state)
{
	(void)state;
	/* A "no change" entry with a body. */
	tamper_short(ENTRY_SHORT_DELTA, 0);
	/* A body past the record's end, and one not a multiple of 8. */
	tamper_short(0, 1u << 30);
	tamper_short(0, 12);
}

static int count_samples(const char *p)
{
	struct kvmstats_log_reader *r = open_reader(p);
	int n = 0;

	while (kvmstats_log_reader__next(r) == 1)
		n++;
	kvmstats_log_reader__close(r);
	return n;
}

/* Rotation keeps N old files, each readable alone; reopen starts a
 * new file when the old one was moved away. */
static void test_rotate_and_reopen(void **state)
{
	struct kvmstats_log_writer *w;
	char old[160], moved[160];
	int total = 0;
	struct stat st;

	(void)state;
	unlink(path);
	w = open_writer(KVMSTATS_LOG_TRUNCATE, 4096, 2, 0);
	for (int k = 0; k < 60; k++)
		assert_int_equal(write_sample(w, k), 0);
	assert_true(kvmstats_log_writer__rotations(w) >= 3);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_size <= 4096 + 2048);
	snprintf(old, sizeof(old), "%s.3", path);
	assert_int_not_equal(stat(old, &st), 0);
	for (int i = 1; i <= 2; i++) {
		snprintf(old, sizeof(old), "%s.%d", path, i);
		assert_int_equal(stat(old, &st), 0);
		assert_true(count_samples(old) > 0);
		total += count_samples(old);
	}
	total += count_samples(path);
	assert_true(total < 60);
	assert_int_equal(kvmstats_log_writer__close(w), 0);

	/* logrotate: move the file, then SIGHUP -> reopen. */
	unlink(path);
	w = open_writer(0, 0, 0, 0);
	for (int k = 0; k < 5; k++)
		assert_int_equal(write_sample(w, k), 0);
	snprintf(moved, sizeof(moved), "%s.moved", path);
	assert_int_equal(rename(path, moved), 0);
	assert_int_equal(kvmstats_log_writer__reopen(w), 0);
	for (int k = 5; k < 9; k++)
		assert_int_equal(write_sample(w, k), 0);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	assert_int_equal(count_samples(moved), 5);
	assert_int_equal(count_samples(path), 4);
	{
		/* The new file is whole by itself: exact values. */
		struct kvmstats_log_reader *r = open_reader(path);

		for (int k = 5; k < 9; k++) {
			assert_int_equal(kvmstats_log_reader__next(r), 1);
			check_sample(r, k);
		}
		kvmstats_log_reader__close(r);
	}
}

/* A write that fails half way (here: the file size limit, as a full disk
 * would) is cut back; samples are dropped, not half written, and the
 * writer goes on once it can. */
static void test_failed_write(void **state)
{
	struct rlimit old, lim;
	struct kvmstats_log_writer *w;
	struct kvmstats_log_reader *r;
	int failed = 0, k, n = 0, ok_after = 0;
	struct stat st;

	(void)state;
	unlink(path);
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	w = open_writer(KVMSTATS_LOG_TRUNCATE, 0, 0, 0);
	lim = old;
	lim.rlim_cur = 3000;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	for (k = 0; k < 40; k++) {
		int ret = write_sample(w, k);

		if (ret)
			failed++;
		if (k == 30) {
			assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
			usleep(2000);	/* past retry_ms */
		}
		if (k > 30 && !ret)
			ok_after++;
	}
	assert_true(failed > 0);
	assert_true(ok_after >= 8);
	assert_int_equal(kvmstats_log_writer__dropped(w), failed);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal((uint64_t)st.st_size, kvmstats_log_writer__size(w));
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	signal(SIGXFSZ, SIG_DFL);

	/* Only whole records: no damage, and every sample read is exact. */
	r = open_reader(path);
	while (kvmstats_log_reader__next(r) == 1) {
		k = (int)(kvmstats_log_reader__time_ns(r) / 1000000000ull) - 1;
		check_sample(r, k);
		n++;
	}
	assert_int_equal(n, 40 - failed);
	assert_int_equal(kvmstats_log_reader__corrupt(r), 0);
	assert_int_equal(kvmstats_log_reader__torn_offset(r), -1);
	kvmstats_log_reader__close(r);
}

static void test_bad_use(void **state)
{
	struct kvmstats_log_writer *w;
	struct kvmstats_log_target t = { .pid = 1, .uid = 1, .vcpu = -1 };
	uint64_t data[8] = { 0 };

	(void)state;
	unlink(path);
	w = open_writer(0, 0, 0, 0);
	assert_int_equal(kvmstats_log_writer__commit(w), -EINVAL);
	assert_int_equal(kvmstats_log_writer__add(w, &t, vm_schema, data, NULL, 0),
			 -EINVAL);
	assert_int_equal(kvmstats_log_writer__begin(w, 1, 1), 0);
	assert_int_equal(kvmstats_log_writer__begin(w, 1, 1), -EBUSY);
	assert_int_equal(kvmstats_log_writer__add(w, &t, vm_schema, data, NULL, 0), 0);
	assert_int_equal(kvmstats_log_writer__add(w, &t, vm_schema, data, NULL, 0),
			 -EEXIST);
	assert_int_equal(kvmstats_log_writer__commit(w), 0);
	assert_int_equal(kvmstats_log_writer__close(w), 0);
	assert_null(kvmstats_log_reader__open(ctx, "/nonexistent/log", NULL));
	assert_int_equal(errno, ENOENT);
}

/* ---- the reader path: add_vmm() after sweeps --------------------------- */

/* A source whose values move at every read and that fails now and then:
 * target j, sweep *k. */
struct fake {
	size_t j;
	const int *k;
};

static int fake_error(size_t j, int k)
{
	return j == 2 && (k == 7 || k == 8) ? -EIO : 0;
}

static int fake_read(void *priv, struct kvmstats_sample *smp, uint64_t *missing)
{
	struct fake *f = priv;

	(void)missing;
	if (fake_error(f->j, *f->k))
		return fake_error(f->j, *f->k);
	for (size_t i = 0; i < smp->size / 8; i++)
		smp->data[i] = value(f->j, *f->k, i);
	return 0;
}

static const struct kvmstats_reader_ops fake_ops = { .source = "fake",
						     .read = fake_read };

/* Every sample written from readers replays exactly, across read errors
 * (the reader keeps its last good data; the log says error) and sweeps
 * that were not written (the next delta has no base in the log: a key). */
static void test_add_vmm(void **state)
{
	struct fake fakes[3];
	int k = 0, got = 0;
	struct kvmstats_vmm *v = kvmstats_vmm__new(4242, "readers");
	struct kvmstats_vm *vm;
	struct kvmstats_log_writer *w;
	struct kvmstats_log_reader *r;
	uint64_t times[40];

	(void)state;
	for (size_t j = 0; j < 3; j++)
		fakes[j] = (struct fake){ j, &k };
	vm = kvmstats_vmm__add_vm(v, kvmstats_reader__open_ops(vm_schema, &fake_ops,
								&fakes[0]));
	assert_non_null(vm);
	for (int c = 0; c < 2; c++)
		assert_int_equal(kvmstats_vm__add_vcpu(vm, c,
						       kvmstats_reader__open_ops(
							       vcpu_schema, &fake_ops,
							       &fakes[c + 1])),
				 0);
	unlink(path);
	w = open_writer(KVMSTATS_LOG_TRUNCATE, 0, 0, 16);
	for (k = 0; k < 40; k++) {
		uint64_t t = 1000000000ull * (k + 1);

		assert_int_equal(kvmstats_reader__sweep(kvmstats_vm__reader(vm), t), 0);
		for (size_t c = 0; c < 2; c++) {
			int index;

			kvmstats_reader__sweep(kvmstats_vm__vcpu(vm, c, &index), t);
		}
		times[k] = 0;
		if (k % 10 == 5)
			continue;	/* read, not written */
		times[k] = t;
		assert_int_equal(kvmstats_log_writer__begin(w, t, 0), 0);
		assert_int_equal(kvmstats_log_writer__add_vmm(w, v), 0);
		assert_int_equal(kvmstats_log_writer__commit(w), 0);
	}
	assert_int_equal(kvmstats_log_writer__close(w), 0);

	r = open_reader(path);
	while (kvmstats_log_reader__next(r) == 1) {
		uint64_t t = kvmstats_log_reader__time_ns(r);

		k = (int)(t / 1000000000ull) - 1;
		assert_int_equal(times[k], t);
		assert_int_equal(kvmstats_log_reader__num_entries(r), 3);
		for (size_t e = 0; e < 3; e++) {
			const struct kvmstats_log_entry *en = kvmstats_log_reader__entry(r, e);
			size_t j = (size_t)(en->target->vcpu + 1);

			assert_int_equal(en->target->pid, 4242);
			assert_string_equal(en->target->name, "readers");
			assert_string_equal(en->target->source, kvmstats_vmm__source(v));
			assert_int_equal(en->error, fake_error(j, k));
			if (en->error)
				continue;
			for (size_t i = 0; i < kvmstats_schema__data_size(en->schema) / 8; i++)
				assert_int_equal(en->data[i], value(j, k, i));
		}
		got++;
	}
	assert_int_equal(got, 36);
	assert_int_equal(kvmstats_log_reader__corrupt(r), 0);
	kvmstats_log_reader__close(r);
	kvmstats_vmm__close(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_deltas_are_small),
		cmocka_unit_test(test_truncate_everywhere),
		cmocka_unit_test(test_crc_corruption),
		cmocka_unit_test(test_append_lock_and_foreign),
		cmocka_unit_test(test_version1_append),
		cmocka_unit_test(test_short_entry_damage),
		cmocka_unit_test(test_rotate_and_reopen),
		cmocka_unit_test(test_failed_write),
		cmocka_unit_test(test_bad_use),
		cmocka_unit_test(test_add_vmm),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
