// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Conformance of a live stats fd: what kvm_stats_read() must do beyond
 * producing a valid image. Reads may start and end anywhere; the header,
 * id and descriptors never change; counters never go down.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Bytes before the data block: they must never change. */
static size_t static_len(const unsigned char *img, size_t len)
{
	struct kvmstats_abi_header h;

	memcpy(&h, img, sizeof(h));
	return h.data_offset < len ? h.data_offset : len;
}

/* Read @len bytes at @pos in pieces of @step, as a reader with a small
 * buffer would, and compare the static part with @img. */
static void check_pieces(int fd, const unsigned char *img, size_t len,
			 size_t stat_len, size_t pos, size_t step,
			 struct kvmstats_report *r)
{
	unsigned char *buf = malloc(len);
	size_t got = pos;

	if (!buf)
		return;
	while (got < len) {
		ssize_t n = pread(fd, buf + got, step, (off_t)got);

		if (n <= 0) {
			ERR(r, "read.offsets", -1,
			    "pread(%zu bytes at %zu) returned %zd before EOF at %zu",
			    step, got, n, len);
			goto out;
		}
		got += (size_t)n;
	}
	if (pos < stat_len && memcmp(buf + pos, img + pos, stat_len - pos))
		ERR(r, "read.offsets", -1,
		    "reading from %zu in %zu-byte pieces gives other header/descriptor bytes",
		    pos, step);
out:
	free(buf);
}

static void check_eof(int fd, size_t len, struct kvmstats_report *r)
{
	unsigned char b[16];
	ssize_t n;

	n = pread(fd, b, sizeof(b), (off_t)len);
	if (n != 0)
		ERR(r, "read.eof", -1, "pread at EOF (%zu) returned %zd", len, n);
	n = pread(fd, b, sizeof(b), (off_t)len + 4096);
	if (n != 0)
		ERR(r, "read.eof", -1, "pread past EOF (%zu) returned %zd",
		    len + 4096, n);
	n = pread(fd, b, sizeof(b), (off_t)len - 3);
	if (n != 3)
		ERR(r, "read.eof", -1, "pread of 16 bytes 3 before EOF returned %zd",
		    n);
}

/* Cumulative and peak stats must not go down between two readings. */
static void check_monotonic(const unsigned char *a, const unsigned char *b,
			    struct kvmstats_report *r)
{
	struct kvmstats_abi_header h;
	size_t dsz;

	memcpy(&h, a, sizeof(h));
	dsz = sizeof(struct kvmstats_abi_desc) + h.name_size;
	for (uint32_t i = 0; i < h.num_desc; i++) {
		struct kvmstats_abi_desc d;
		const char *name = (const char *)a + h.desc_offset + i * dsz +
				   sizeof(d);
		unsigned int type;

		memcpy(&d, a + h.desc_offset + i * dsz, sizeof(d));
		type = KVMSTATS_FLAG_TYPE(d.flags);
		if (type != KVMSTATS_TYPE_CUMULATIVE && type != KVMSTATS_TYPE_PEAK &&
		    type != KVMSTATS_TYPE_LINEAR_HIST &&
		    type != KVMSTATS_TYPE_LOG_HIST)
			continue;
		for (uint32_t k = 0; k < d.size; k++) {
			uint64_t x, y;
			size_t off = h.data_offset + d.offset + k * 8;

			memcpy(&x, a + off, 8);
			memcpy(&y, b + off, 8);
			if (y < x)
				ERR(r, "data.monotonic", (int32_t)i,
				    "%s[%u] went down from %llu to %llu", name, k,
				    (unsigned long long)x, (unsigned long long)y);
		}
	}
}

int kvmstats_fd__check(int fd, struct kvmstats_report *r)
{
	unsigned char *a = NULL, *b = NULL;
	size_t alen, blen, slen;
	int err, errors = (int)kvmstats_report__errors(r);

	err = ks_read_all_fd(fd, &a, &alen);
	if (err) {
		ERR(r, "read.whole", -1, "reading the fd to EOF: %s", strerror(-err));
		return (int)kvmstats_report__errors(r) - errors;
	}
	if (ks_check_image(a, alen, r) || kvmstats_report__errors(r) > (size_t)errors)
		goto out;
	slen = static_len(a, alen);
	/* Odd pieces and starts: inside the header, the id, a descriptor. */
	check_pieces(fd, a, alen, slen, 0, 1, r);
	check_pieces(fd, a, alen, slen, 3, 7, r);
	check_pieces(fd, a, alen, slen, 17, 61, r);
	check_pieces(fd, a, alen, slen, slen > 5 ? slen - 5 : 0, 13, r);
	check_eof(fd, alen, r);
	err = ks_read_all_fd(fd, &b, &blen);
	if (err) {
		ERR(r, "read.whole", -1, "second read: %s", strerror(-err));
		goto out;
	}
	if (blen != alen || memcmp(a, b, slen))
		ERR(r, "read.stable", -1,
		    "second read returned %zu bytes, other header/descriptors", blen);
	else
		check_monotonic(a, b, r);
out:
	free(a);
	free(b);
	return (int)kvmstats_report__errors(r) - errors;
}

int kvmstats_fd__compare(int fd_a, int fd_b, const char *rule,
			 struct kvmstats_report *r)
{
	unsigned char *a = NULL, *b = NULL;
	size_t alen, blen;
	int err, errors = (int)kvmstats_report__errors(r);

	err = ks_read_all_fd(fd_a, &a, &alen);
	if (!err)
		err = ks_read_all_fd(fd_b, &b, &blen);
	if (err) {
		ERR(r, rule, -1, "read: %s", strerror(-err));
		goto out;
	}
	if (alen < sizeof(struct kvmstats_abi_header) || blen != alen ||
	    memcmp(a, b, static_len(a, alen)))
		ERR(r, rule, -1,
		    "the two fds return different header, id or descriptors (%zu vs %zu bytes)",
		    alen, blen);
out:
	free(a);
	free(b);
	return (int)kvmstats_report__errors(r) - errors;
}
