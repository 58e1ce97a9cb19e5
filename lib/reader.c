// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Readers: one target (a VM or a vCPU) and where its data comes from.
 *
 * Opening reads the whole file once (header to EOF: a few KiB) and checks
 * it; after that a reading of a stats fd is exactly one pread of the data
 * block into the caller's sample. Sources that are not an fd (an image in
 * memory, QMP, debugfs, ...) fill the same data block layout, so every
 * consumer reads every source the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct kvmstats_reader {
	struct kvmstats_schema *schema;
	int fd;
	unsigned int flags;
	off_t data_offset;
	size_t data_size;
	char *id;
	unsigned char *image;		/* in-memory source */
	size_t image_len;
	const struct kvmstats_reader_ops *ops;
	void *priv;
	uint64_t *missing;		/* bitmap, for ops sources */
	size_t missing_words;
	bool any_missing;
	/* Sweep buffers: allocated at open, swapped on every sweep. */
	struct kvmstats_sample *cur, *prev;
	unsigned int sweeps;
	int error;
	uint64_t age_ns;
};

/* Allocate the sweep buffers; every constructor calls this last. */
static int reader_alloc_sweep(struct kvmstats_reader *r)
{
	r->cur = kvmstats_sample__new(r->schema);
	r->prev = kvmstats_sample__new(r->schema);
	return r->cur && r->prev ? 0 : -ENOMEM;
}

/* Double @buf, up to KS_MAX_IMAGE bytes. */
static int grow_buf(unsigned char **buf, size_t *cap)
{
	void *p;

	if (*cap >= KS_MAX_IMAGE)
		return -EFBIG;
	p = realloc(*buf, *cap * 2);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap *= 2;
	return 0;
}

/* How long an image file that is a pipe, a FIFO, a socket or a terminal
 * may go without giving a byte: a FIFO nobody opens for writing must not
 * hang a command forever. */
#define STREAM_IDLE_MS 5000

/* The next bytes at @off. A file by pread (a stats fd's lseek does
 * nothing: the position is ours). A stream by read(2), since a pipe has
 * no offsets to pread at (ESPIPE): its fd is non-blocking, and each wait
 * for more bytes is a poll of at most STREAM_IDLE_MS (-ETIMEDOUT). A FIFO
 * that never had a writer polls as empty (Linux reports no hangup before
 * a first writer), so it times out. Returns bytes, 0 at the end, -errno;
 * -EAGAIN: interrupted, try again. */
static ssize_t read_chunk(int fd, bool stream, unsigned char *p, size_t len, size_t off)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t r;

	if (!stream) {
		r = pread(fd, p, len, (off_t)off);
	} else {
		r = poll(&pfd, 1, STREAM_IDLE_MS);
		if (!r)
			return -ETIMEDOUT;
		if (r > 0)
			r = read(fd, p, len);
	}
	if (r >= 0)
		return r;
	if (errno == EINTR || (stream && errno == EAGAIN))
		return -EAGAIN;
	return -errno;
}

/* Read @fd to its end, at most KS_MAX_IMAGE bytes. */
static int read_all(int fd, bool stream, unsigned char **out, size_t *len)
{
	size_t cap = 16384, n = 0;
	unsigned char *buf = malloc(cap);
	int err;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t r;

		if (n == cap && (err = grow_buf(&buf, &cap)))
			goto err;
		r = read_chunk(fd, stream, buf + n, cap - n, n);
		if (r == -EAGAIN)
			continue;
		if (r < 0) {
			err = (int)r;
			goto err;
		}
		if (!r)
			break;
		n += (size_t)r;
	}
	*out = buf;
	*len = n;
	return 0;
err:
	free(buf);
	return err;
}

int ks_read_all_fd(int fd, unsigned char **out, size_t *len)
{
	return read_all(fd, false, out, len);
}

/* An image file's bytes: a regular file (or a stats fd's /proc path) by
 * pread; a pipe, FIFO, socket or terminal as a stream. */
static int read_image_file(const char *path, unsigned char **img, size_t *len)
{
	struct stat st;
	int fd, err;

	/* O_NONBLOCK: opening a FIFO for reading waits for a writer. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st))
		err = -errno;
	else
		err = read_all(fd, S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
				       S_ISCHR(st.st_mode), img, len);
	close(fd);
	return err;
}

static const char *image_strerror(int err)
{
	switch (err) {
	case -EFBIG:
		return "larger than any stats image";
	case -ETIMEDOUT:
		return "nothing to read for 5 s (a FIFO without a writer?)";
	default:
		return strerror(-err);
	}
}

static int reader_opts(struct kvmstats_reader_opts *o,
		       const struct kvmstats_reader_opts *opts)
{
	int err = ks_opts_copy(o, sizeof(*o), opts);

	if (err)
		errno = -err;
	return err;
}

/* Build a reader around a whole image: parse it, copy the id. */
static struct kvmstats_reader *reader_from_image(struct kvmstats_ctx *ctx,
						 unsigned char *img, size_t len,
						 const struct kvmstats_reader_opts *o)
{
	struct kvmstats_reader *r;
	struct kvmstats_schema *s;
	const char *id;

	s = kvmstats_schema__parse(ctx, img, len, o->errbuf, o->errbuf_sz);
	if (!s)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		goto err;
	id = (const char *)img + s->hdr.id_offset;
	r->id = strndup(id, s->hdr.name_size);
	if (!r->id)
		goto err;
	r->schema = s;
	r->fd = -1;
	r->flags = o->flags;
	r->data_offset = s->hdr.data_offset;
	r->data_size = s->data_size;
	if (reader_alloc_sweep(r))
		goto err;
	return r;
err:
	if (r) {
		kvmstats_sample__free(r->cur);
		kvmstats_sample__free(r->prev);
		free(r->id);
	}
	free(r);
	kvmstats_schema__put(s);
	ks_err(o->errbuf, o->errbuf_sz, "out of memory");
	errno = ENOMEM;
	return NULL;
}

/* A reader of @img (@len bytes, malloc'd), which then owns it; @img is
 * freed when no reader can be made of it. */
static struct kvmstats_reader *reader_own_image(struct kvmstats_ctx *ctx,
						unsigned char *img, size_t len,
						const struct kvmstats_reader_opts *o)
{
	struct kvmstats_reader *r = reader_from_image(ctx, img, len, o);

	if (!r) {
		free(img);
		return NULL;
	}
	r->image = img;
	r->image_len = len;
	return r;
}

struct kvmstats_reader *kvmstats_reader__open_fd(struct kvmstats_ctx *ctx,
						 int fd,
						 const struct kvmstats_reader_opts *opts)
{
	struct kvmstats_reader_opts o;
	struct kvmstats_reader *r;
	unsigned char *img;
	size_t len;
	int err;

	if (reader_opts(&o, opts))
		return NULL;
	err = ks_read_all_fd(fd, &img, &len);
	if (err) {
		ks_err(o.errbuf, o.errbuf_sz, "read: %s", strerror(-err));
		errno = -err;
		return NULL;
	}
	r = reader_from_image(ctx, img, len, &o);
	free(img);
	if (!r)
		return NULL;
	r->fd = fd;
	return r;
}

struct kvmstats_reader *kvmstats_reader__open_mem(struct kvmstats_ctx *ctx,
						  const void *buf, size_t len,
						  const struct kvmstats_reader_opts *opts)
{
	struct kvmstats_reader_opts o;
	unsigned char *img;

	if (reader_opts(&o, opts))
		return NULL;
	if (len > KS_MAX_IMAGE) {
		ks_err(o.errbuf, o.errbuf_sz, "image of %zu bytes is too large", len);
		errno = EFBIG;
		return NULL;
	}
	img = malloc(len ? len : 1);
	if (!img)
		return NULL;
	memcpy(img, buf, len);
	return reader_own_image(ctx, img, len, &o);
}

struct kvmstats_reader *kvmstats_reader__open_file(struct kvmstats_ctx *ctx,
						   const char *path,
						   const struct kvmstats_reader_opts *opts)
{
	struct kvmstats_reader_opts o;
	unsigned char *img = NULL;
	size_t len = 0;
	int err;

	if (reader_opts(&o, opts))
		return NULL;
	err = read_image_file(path, &img, &len);
	if (!err && !img)
		err = -EIO;
	if (err) {
		ks_err(o.errbuf, o.errbuf_sz, "%s", image_strerror(err));
		errno = -err;
		return NULL;
	}
	return reader_own_image(ctx, img, len, &o);
}

struct kvmstats_reader *kvmstats_reader__open_ops(struct kvmstats_schema *schema,
						  const struct kvmstats_reader_ops *ops,
						  void *priv)
{
	struct kvmstats_reader *r;

	if (!schema || !ops || !ops->read) {
		errno = EINVAL;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->missing_words = (schema->num + 63) / 64;
	r->missing = calloc(r->missing_words ? r->missing_words : 1, 8);
	r->id = strdup("");
	if (!r->missing || !r->id) {
		free(r->missing);
		free(r->id);
		free(r);
		errno = ENOMEM;
		return NULL;
	}
	r->schema = kvmstats_schema__get(schema);
	r->fd = -1;
	r->data_size = schema->data_size;
	if (reader_alloc_sweep(r)) {
		kvmstats_reader__close(r);
		errno = ENOMEM;
		return NULL;
	}
	r->ops = ops;
	r->priv = priv;
	return r;
}

int ks_reader_set_id(struct kvmstats_reader *r, const char *id)
{
	char *copy = strdup(id);

	if (!copy)
		return -ENOMEM;
	free(r->id);
	r->id = copy;
	return 0;
}

void kvmstats_reader__close(struct kvmstats_reader *r)
{
	if (!r)
		return;
	if (r->ops && r->ops->close)
		r->ops->close(r->priv);
	if (r->fd >= 0 && (r->flags & KVMSTATS_READER_OWN_FD))
		close(r->fd);
	kvmstats_schema__put(r->schema);
	kvmstats_sample__free(r->cur);
	kvmstats_sample__free(r->prev);
	free(r->missing);
	free(r->image);
	free(r->id);
	free(r);
}

static int read_ops(struct kvmstats_reader *r, struct kvmstats_sample *smp)
{
	int err;

	memset(r->missing, 0, r->missing_words * 8);
	err = r->ops->read(r->priv, smp, r->missing);
	r->any_missing = false;
	for (size_t i = 0; i < r->missing_words; i++)
		r->any_missing |= r->missing[i] != 0;
	return err;
}

/* The data block into @smp: one pread for an fd. */
static int read_data(struct kvmstats_reader *r, struct kvmstats_sample *smp)
{
	ssize_t n;

	if (r->fd >= 0) {
		n = pread(r->fd, smp->data, r->data_size, r->data_offset);
		if (n == (ssize_t)r->data_size)
			return 0;
		return n < 0 ? -errno : -ENODATA;
	}
	if (r->ops)
		return read_ops(r, smp);
	memcpy(smp->data, r->image + r->data_offset, r->data_size);
	return 0;
}

/*
 * When the data of an ops source's reading was taken. A background source
 * (QMP, libvirt) serves a snapshot polled earlier: its time is now less
 * its age, which can be a whole interval. A slow synchronous one (debugfs:
 * a file per stat and vCPU) took its data between @t0 and now: the middle.
 * A rate over the sweep's time instead would divide one poll's worth of
 * counting by the interval between two sweeps.
 */
static uint64_t ops_time(struct kvmstats_reader *r, uint64_t t0)
{
	uint64_t t1 = ks_now_ns();

	r->age_ns = r->ops->age_ns ? r->ops->age_ns(r->priv) : 0;
	if (r->ops->age_ns)
		return r->age_ns < t1 ? t1 - r->age_ns : 0;
	return t0 + (t1 - t0) / 2;
}

int kvmstats_reader__read(struct kvmstats_reader *r,
			  struct kvmstats_sample *smp)
{
	uint64_t t0;
	int err;

	if (smp->size < r->data_size)
		return -EINVAL;
	if (r->flags & KVMSTATS_READER_NO_TIME)
		return read_data(r, smp);
	t0 = ks_now_ns();
	err = read_data(r, smp);
	smp->time_ns = !err && r->fd < 0 && r->ops ? ops_time(r, t0) : t0;
	return err;
}

int kvmstats_reader__sweep(struct kvmstats_reader *r, uint64_t time_ns)
{
	struct kvmstats_sample *t = r->prev;
	uint64_t t0 = r->fd < 0 && r->ops ? ks_now_ns() : 0;
	int err = read_data(r, t);

	/* A failed read keeps the last good reading as the current one. */
	r->error = err;
	if (err)
		return err;
	/* An fd's pread is one copy: the sweep's time is its time. */
	t->time_ns = r->fd < 0 && r->ops ? ops_time(r, t0) : time_ns;
	r->prev = r->cur;
	r->cur = t;
	if (r->sweeps < 2)
		r->sweeps++;
	return 0;
}

const struct kvmstats_sample *kvmstats_reader__cur(const struct kvmstats_reader *r)
{
	return r->sweeps >= 1 ? r->cur : NULL;
}

const struct kvmstats_sample *kvmstats_reader__prev(const struct kvmstats_reader *r)
{
	return r->sweeps >= 2 ? r->prev : NULL;
}

int kvmstats_reader__error(const struct kvmstats_reader *r)
{
	return r->error;
}

uint64_t kvmstats_reader__age_ns(const struct kvmstats_reader *r)
{
	return r->age_ns;
}

struct kvmstats_schema *kvmstats_reader__schema(const struct kvmstats_reader *r)
{
	return r->schema;
}

const char *kvmstats_reader__id(const struct kvmstats_reader *r)
{
	return r->id;
}

int kvmstats_reader__fd(const struct kvmstats_reader *r)
{
	return r->fd;
}

const char *kvmstats_reader__source(const struct kvmstats_reader *r)
{
	if (r->ops)
		return r->ops->source;
	return r->fd >= 0 ? "fd" : "file";
}

const uint64_t *kvmstats_reader__missing(const struct kvmstats_reader *r)
{
	return r->any_missing ? r->missing : NULL;
}

bool kvmstats_reader__no_counter(const struct kvmstats_reader *r)
{
	const uint64_t *miss = r ? kvmstats_reader__missing(r) : NULL;
	const struct kvmstats_stat *st;
	bool any = false;

	if (!miss)
		return false;
	kvmstats_schema__for_each (st, kvmstats_reader__schema(r)) {
		uint32_t i = kvmstats_stat__index(st);

		if (kvmstats_stat__type(st) != KVMSTATS_TYPE_CUMULATIVE)
			continue;
		if (!((miss[i / 64] >> (i % 64)) & 1))
			return false;
		any = true;
	}
	return any;
}

void *kvmstats_reader__image(struct kvmstats_reader *r, size_t *len)
{
	unsigned char *img = NULL;
	int err;

	if (r->image) {
		img = malloc(r->image_len ? r->image_len : 1);
		if (!img)
			return NULL;
		memcpy(img, r->image, r->image_len);
		*len = r->image_len;
		return img;
	}
	if (r->fd < 0) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	err = ks_read_all_fd(r->fd, &img, len);
	if (err) {
		errno = -err;
		return NULL;
	}
	return img;
}

struct kvmstats_sample *kvmstats_sample__new(const struct kvmstats_schema *s)
{
	struct kvmstats_sample *smp = calloc(1, sizeof(*smp));
	size_t size = s->data_size;

	if (!smp)
		return NULL;
	/* Never zero bytes: a schema of no stats still gets a buffer. */
	smp->data = calloc(1, size ? size : 8);
	if (!smp->data) {
		free(smp);
		return NULL;
	}
	smp->size = size;
	return smp;
}

void kvmstats_sample__free(struct kvmstats_sample *smp)
{
	if (!smp)
		return;
	free(smp->data);
	free(smp);
}

/* Parallel sweeps (sweep.c) read thousands of readers in a row, each a
 * chain of cold cache lines (reader, sample, data block): warming them a
 * few readers ahead, one link per @stage (0, 1, 2), overlaps the misses. */
void ks_reader_prefetch(const struct kvmstats_reader *r, int stage)
{
	if (stage == 0) {
		/* The struct spans three lines; a sweep reads all of them. */
		for (size_t i = 0; i < sizeof(*r); i += 64)
			__builtin_prefetch((const char *)r + i);
	} else if (stage == 1) {
		__builtin_prefetch(r->prev);
	} else {
		const char *d = (const char *)r->prev->data;

		for (size_t i = 0; i < r->data_size; i += 64)
			__builtin_prefetch(d + i, 1);
	}
}
