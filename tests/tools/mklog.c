// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * mklog DIR: write statistics logs for the reader's tests and the log
 * fuzzer's seed corpus: a sound log written by the library's writer, and
 * logs forged the way a hostile file would be:
 *
 *   valid.log       three targets, 40 samples, deltas and key entries
 *   cut.log         valid.log cut inside its last record (kill -9)
 *   flipped.log     valid.log with a byte of a middle record changed
 *   flood.log       1 MiB: a sync word every 16 bytes, each record
 *                   claiming the rest of the file (resync work)
 *   alternate.log   1 MiB: sound small records, each followed by one
 *                   that claims the rest of the file and fails its CRC
 *   ids.log         2.5 KiB: sound records naming ids near 2^24 and a
 *                   1 MiB data block (tables and allocations)
 *   names.log       a sound log whose VM name, stats id and stat name
 *                   hold terminal escapes, BEL, C1 CSI and bytes that are
 *                   not UTF-8 (HOSTILE_* below)
 *   names.bin       a stats image with that id and stat name
 *   arm64.log       an arm64 VM of 2 vCPUs, 10 samples 1 s apart, with
 *                   arm64's exit counters (names as its kernel has them);
 *                   per vCPU and second: exits +1000, hvc_exit_stat +100,
 *                   wfi_exit_stat +50, wfe_exit_stat +20, mmio_exit_user
 *                   +10, mmio_exit_kernel +5, halt_wakeup +40
 *
 * With --small the two 1 MiB files are 16 KiB (fuzzer seeds).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmstats.h"
#include "kvmstats_log.h"
#include "../../lib/log_format.h"

#define F(t, u) KVMSTATS_FLAGS(KVMSTATS_TYPE_##t, KVMSTATS_UNIT_##u, 0)

#define HOSTILE_NAME "VM \x1b[31mEVIL\x1b[0m\x1b]0;pwned\x07\xff\xfe"
#define HOSTILE_ID "kvm-1\x1b[2J\xc2\x9b"
#define HOSTILE_STAT "exits\x1b[5m\xff"

static const char *dir;
static size_t big = 1 << 20;

static struct kvmstats_schema *make_schema(struct kvmstats_ctx *ctx,
					   struct kvmstats_reader **rd)
{
	static const struct kvmstats_encode_desc d[] = {
		{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "halt_exits", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "pages_4k", F(INSTANT, NONE), 0, 1, 0 },
		{ "halt_wait_hist", F(LOG_HIST, SECONDS), -9, 8, 0 },
	};
	static const uint64_t v[11] = { 1, 2, 3 };
	size_t len;
	void *img = kvmstats_image__encode("kvm-4242/vcpu-0", d, 4, v, &len, NULL);

	*rd = img ? kvmstats_reader__open_mem(ctx, img, len, NULL) : NULL;
	free(img);
	return *rd ? kvmstats_reader__schema(*rd) : NULL;
}

static char *path_of(const char *name)
{
	static char p[4096];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

static int write_valid(void)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_reader *rd;
	struct kvmstats_schema *s = make_schema(ctx, &rd);
	struct kvmstats_log_writer *w;
	uint64_t data[11] = { 0 };
	int err = 0;

	unlink(path_of("valid.log"));
	w = s ? kvmstats_log_writer__open(ctx, path_of("valid.log"),
		&(struct kvmstats_log_writer_opts){
			.sz = sizeof(struct kvmstats_log_writer_opts),
			.keyframe_interval = 8 }) : NULL;
	if (!w)
		return -1;
	for (int i = 0; i < 40 && !err; i++) {
		err = kvmstats_log_writer__begin(w, 1000000000ull * (i + 1),
						 1700000000000000000ull + 1000000000ull * i);
		for (int t = 0; t < 3 && !err; t++) {
			struct kvmstats_log_target tg = {
				.pid = 4242, .uid = 7, .vm = 0, .vcpu = t - 1,
				.name = "web1", .id = "kvm-4242", .source = "fd" };

			data[0] = (uint64_t)(i * 10 + t);
			data[1] = (uint64_t)(i / 3);
			data[3 + t] = (uint64_t)i;
			err = kvmstats_log_writer__add(w, &tg, s, data, NULL, 0);
		}
		if (!err)
			err = kvmstats_log_writer__commit(w);
	}
	err |= kvmstats_log_writer__close(w);
	kvmstats_reader__close(rd);
	kvmstats_ctx__free(ctx);
	return err;
}

static unsigned char *slurp(const char *name, size_t *len)
{
	FILE *f = fopen(path_of(name), "rb");
	unsigned char *buf = malloc(1 << 20);

	*len = f && buf ? fread(buf, 1, 1 << 20, f) : 0;
	if (f)
		fclose(f);
	return buf;
}

static int spit(const char *name, const void *buf, size_t len)
{
	FILE *f = fopen(path_of(name), "wb");

	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		fprintf(stderr, "mklog: %s: %s\n", path_of(name), strerror(errno));
		return -1;
	}
	return 0;
}

/* A sound record of @type with @payload at @p; returns its size. */
static size_t put_rec(unsigned char *p, uint16_t type, const void *payload,
		      uint32_t len)
{
	struct log_rec h = { .sync = REC_SYNC, .type = type, .len = len };

	memcpy(p + sizeof(h), payload, len);
	h.crc = log_rec_crc(&h, p + sizeof(h));
	memcpy(p, &h, sizeof(h));
	return sizeof(h) + len;
}

/* A header claiming @len bytes, with a CRC that does not match them. */
static void put_claim(unsigned char *p, uint32_t len)
{
	struct log_rec h = { .sync = REC_SYNC, .type = REC_SAMPLE, .len = len,
			     .crc = 0xdeadbeef };

	memcpy(p, &h, sizeof(h));
}

static unsigned char *new_log(size_t len)
{
	unsigned char *buf = calloc(1, len);

	if (buf)
		log_file_hdr_init((struct log_file_hdr *)buf);
	return buf;
}

static int write_flood(void)
{
	unsigned char *buf = new_log(big);
	int err;

	if (!buf)
		return -1;
	for (size_t at = sizeof(struct log_file_hdr); at + 16 <= big; at += 16)
		put_claim(buf + at, (uint32_t)(big - at - 16));
	err = spit("flood.log", buf, big);
	free(buf);
	return err;
}

static int write_alternate(void)
{
	unsigned char *buf = new_log(big);
	struct log_gone g = { .tid = 1 };
	size_t at = sizeof(struct log_file_hdr);
	int err;

	if (!buf)
		return -1;
	while (at + 40 <= big) {
		at += put_rec(buf + at, REC_GONE, &g, sizeof(g));
		put_claim(buf + at, (uint32_t)(big - at - 16));
		at += 16;
	}
	err = spit("alternate.log", buf, big);
	free(buf);
	return err;
}

/* A schema whose one stat ends at 1 MiB, and targets on it, with ids
 * just below 2^24 (the old reader's limit on ids it indexed tables by). */
static int write_ids(void)
{
	unsigned char *buf = new_log(2560), rec[512];
	struct kvmstats_abi_header h = { .name_size = 8, .num_desc = 1,
					 .id_offset = 24, .desc_offset = 32,
					 .data_offset = 56 };
	struct kvmstats_abi_desc d = { .flags = F(CUMULATIVE, NONE), .size = 1,
				       .offset = (1u << 20) - 8 };
	struct log_schema ls = { .sid = 0xffffffu, .data_size = 1u << 20,
				 .key_len = sizeof(h) + sizeof(d) + 8 };
	size_t at = sizeof(struct log_file_hdr);
	int err;

	if (!buf)
		return -1;
	memcpy(rec, &ls, sizeof(ls));
	memcpy(rec + sizeof(ls), &h, sizeof(h));
	memcpy(rec + sizeof(ls) + sizeof(h), &d, sizeof(d));
	memcpy(rec + sizeof(ls) + sizeof(h) + sizeof(d), "exits\0\0", 8);
	at += put_rec(buf + at, REC_SCHEMA, rec, (uint32_t)pad8(sizeof(ls) + ls.key_len));
	for (uint32_t i = 0; at + 16 + 48 <= 2560; i++) {
		struct log_target t = { .tid = 0xffffffu - i,
					.sid = ls.sid, .name_len = 2, .id_len = 2,
					.source_len = 2 };

		memset(rec, 0, 48);
		memcpy(rec, &t, sizeof(t));
		memcpy(rec + sizeof(t), "a\0b\0c", 6);
		at += put_rec(buf + at, REC_TARGET, rec, 48);
	}
	err = spit("ids.log", buf, 2560);
	free(buf);
	return err;
}

/* The names a hostile VMM or file would choose. */
static int write_names(void)
{
	static const struct kvmstats_encode_desc d[] = {
		{ HOSTILE_STAT, F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "halt_exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	};
	static const uint64_t v[2] = { 42, 7 };
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_log_target tg = { .pid = 4242, .uid = 7, .vcpu = -1,
					  .name = HOSTILE_NAME, .id = HOSTILE_ID,
					  .source = "fd" };
	struct kvmstats_log_writer *w;
	struct kvmstats_reader *rd;
	size_t len;
	void *img = kvmstats_image__encode(HOSTILE_ID, d, 2, v, &len, NULL);
	int err = img ? spit("names.bin", img, len) : -1;

	rd = img ? kvmstats_reader__open_mem(ctx, img, len, NULL) : NULL;
	free(img);
	unlink(path_of("names.log"));
	w = rd ? kvmstats_log_writer__open(ctx, path_of("names.log"), NULL) : NULL;
	for (int i = 0; w && i < 3 && !err; i++) {
		err = kvmstats_log_writer__begin(w, 1000000000ull * (i + 1), 0);
		if (!err)
			err = kvmstats_log_writer__add(w, &tg, kvmstats_reader__schema(rd),
						       v, NULL, 0);
		if (!err)
			err = kvmstats_log_writer__commit(w);
	}
	if (!w || kvmstats_log_writer__close(w))
		err = -1;
	kvmstats_reader__close(rd);
	kvmstats_ctx__free(ctx);
	return err;
}

/* An arm64 VM: the stats its vCPUs have (none of x86's exit counters). */
static int write_arm64(void)
{
	static const struct kvmstats_encode_desc d[] = {
		{ "halt_wakeup", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "blocking", F(INSTANT, BOOLEAN), 0, 1, 0 },
		{ "hvc_exit_stat", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "wfe_exit_stat", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "wfi_exit_stat", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "mmio_exit_user", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "mmio_exit_kernel", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "signal_exits", F(CUMULATIVE, NONE), 0, 1, 0 },
		{ "exits", F(CUMULATIVE, NONE), 0, 1, 0 },
	};
	static const uint64_t step[9] = { 40, 0, 100, 20, 50, 10, 5, 0, 1000 };
	static const struct kvmstats_encode_desc vmd[] = {
		{ "remote_tlb_flush", F(CUMULATIVE, NONE), 0, 1, 0 },
	};
	uint64_t v[9] = { 0 }, vmv[1] = { 0 };
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_reader *rd = NULL, *vmrd = NULL;
	struct kvmstats_log_writer *w = NULL;
	size_t len;
	void *img = kvmstats_image__encode("kvm-4343/vcpu-0", d, 9, v, &len, NULL);
	int err = -1;

	rd = img ? kvmstats_reader__open_mem(ctx, img, len, NULL) : NULL;
	free(img);
	img = kvmstats_image__encode("kvm-4343", vmd, 1, vmv, &len, NULL);
	vmrd = img ? kvmstats_reader__open_mem(ctx, img, len, NULL) : NULL;
	free(img);
	unlink(path_of("arm64.log"));
	if (rd && vmrd)
		w = kvmstats_log_writer__open(ctx, path_of("arm64.log"), NULL);
	for (int i = 0; w && i < 10; i++) {
		err = kvmstats_log_writer__begin(w, 1000000000ull * (i + 1),
						 1700000000000000000ull + 1000000000ull * i);
		for (int t = -1; t < 2 && !err; t++) {
			struct kvmstats_log_target tg = {
				.pid = 4343, .uid = 9, .vm = 0, .vcpu = t,
				.name = "arm64-vm", .id = "kvm-4343", .source = "fd" };

			for (int k = 0; k < 9; k++)
				v[k] = step[k] * (uint64_t)i;
			vmv[0] = (uint64_t)i;
			err = t < 0 ? kvmstats_log_writer__add(w, &tg, kvmstats_reader__schema(vmrd),
							       vmv, NULL, 0)
				    : kvmstats_log_writer__add(w, &tg, kvmstats_reader__schema(rd),
							       v, NULL, 0);
		}
		if (!err)
			err = kvmstats_log_writer__commit(w);
		if (err)
			break;
	}
	if (!w || kvmstats_log_writer__close(w))
		err = -1;
	kvmstats_reader__close(rd);
	kvmstats_reader__close(vmrd);
	kvmstats_ctx__free(ctx);
	return err;
}

/* valid.log, damaged two ways. */
static int write_damaged(void)
{
	size_t len;
	unsigned char *buf = slurp("valid.log", &len);
	int err;

	if (!buf || len < 4096)
		return -1;
	err = spit("cut.log", buf, len - 13);
	buf[len / 2] ^= 0x40;
	err |= spit("flipped.log", buf, len);
	free(buf);
	return err;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--small")) {
		big = 16384;
		argv++;
		argc--;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: mklog [--small] DIR\n");
		return 2;
	}
	dir = argv[1];
	if (write_valid() || write_damaged() || write_flood() ||
	    write_alternate() || write_ids() || write_names() || write_arm64()) {
		fprintf(stderr, "mklog: failed\n");
		return 1;
	}
	return 0;
}
