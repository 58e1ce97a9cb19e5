/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvmstats: read KVM's binary statistics (KVM_GET_STATS_FD).
 *
 * A stats fd, or a saved image of one, is laid out as
 *
 *	header | id string | descriptors | data (u64 values)
 *
 * and the descriptors never change for the life of the fd. The library
 * parses them once into a schema, shared by every target whose descriptor
 * block is byte-identical, and then reads only the data block, with one
 * pread, into memory the caller allocated beforehand.
 *
 * Conventions (as in libbpf):
 *  - objects are opaque and reached through kvmstats_<object>__<verb>();
 *  - functions returning int return 0 (or a count) on success and a
 *    negative errno on failure; functions returning a pointer return NULL
 *    and set errno;
 *  - *_opts structs start with `size_t sz`; fill them with
 *    KVMSTATS_OPTS(type, field = value, ...) so that new fields can be
 *    added without breaking callers; NULL means defaults;
 *  - the library never prints and holds no global state. Readable error
 *    messages go to the caller's buffer (an errbuf in the opts) or to the
 *    kvmstats_ctx's log callback.
 *  - an object may be used from one thread at a time; distinct readers may
 *    be used from distinct threads concurrently.
 */
#ifndef KVMSTATS_H
#define KVMSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVMSTATS_API __attribute__((visibility("default")))

#define KVMSTATS_OPTS(TYPE, NAME, ...)                                         \
	struct TYPE NAME = ({                                                  \
		memset(&NAME, 0, sizeof(struct TYPE));                         \
		(struct TYPE){ .sz = sizeof(struct TYPE), __VA_ARGS__ };       \
	})

KVMSTATS_API const char *kvmstats_version_string(void);

/* ---------------------------------------------------------------------
 * The ABI, as merged in Linux 5.14 (mirrors <linux/kvm.h>, so that users
 * and image files do not depend on the build host's kernel headers).
 */
struct kvmstats_abi_header {
	uint32_t flags;
	uint32_t name_size;
	uint32_t num_desc;
	uint32_t id_offset;
	uint32_t desc_offset;
	uint32_t data_offset;
};

struct kvmstats_abi_desc {
	uint32_t flags;
	int16_t exponent;
	uint16_t size;
	uint32_t offset;
	uint32_t bucket_size;
	char name[];
};

enum kvmstats_type {
	KVMSTATS_TYPE_CUMULATIVE = 0,
	KVMSTATS_TYPE_INSTANT = 1,
	KVMSTATS_TYPE_PEAK = 2,
	KVMSTATS_TYPE_LINEAR_HIST = 3,
	KVMSTATS_TYPE_LOG_HIST = 4,
};

enum kvmstats_unit {
	KVMSTATS_UNIT_NONE = 0,
	KVMSTATS_UNIT_BYTES = 1,
	KVMSTATS_UNIT_SECONDS = 2,
	KVMSTATS_UNIT_CYCLES = 3,
	KVMSTATS_UNIT_BOOLEAN = 4,
};

enum kvmstats_base {
	KVMSTATS_BASE_POW10 = 0,
	KVMSTATS_BASE_POW2 = 1,
};

#define KVMSTATS_FLAG_TYPE(f) ((f)&0xf)
#define KVMSTATS_FLAG_UNIT(f) (((f) >> 4) & 0xf)
#define KVMSTATS_FLAG_BASE(f) (((f) >> 8) & 0xf)
#define KVMSTATS_FLAGS(type, unit, base)                                       \
	((uint32_t)(type) | ((uint32_t)(unit) << 4) | ((uint32_t)(base) << 8))

/* Names for display and JSON ("cumulative", "bytes", ...); "unknown" for
 * values a newer kernel may define. */
KVMSTATS_API const char *kvmstats_type_str(unsigned int type);
KVMSTATS_API const char *kvmstats_unit_str(unsigned int unit);
KVMSTATS_API const char *kvmstats_base_str(unsigned int base);

/* ---------------------------------------------------------------------
 * Context: owns the schema cache (so that identical descriptor blocks are
 * parsed and stored once) and the log callback.
 */
struct kvmstats_ctx;

enum kvmstats_log_level {
	KVMSTATS_LOG_WARN,
	KVMSTATS_LOG_INFO,
	KVMSTATS_LOG_DEBUG,
};

typedef void (*kvmstats_log_fn)(enum kvmstats_log_level level,
				const char *msg, void *arg);

struct kvmstats_ctx_opts {
	size_t sz;
	kvmstats_log_fn log; /* NULL: silent */
	void *log_arg;
};

KVMSTATS_API struct kvmstats_ctx *
kvmstats_ctx__new(const struct kvmstats_ctx_opts *opts);
KVMSTATS_API void kvmstats_ctx__free(struct kvmstats_ctx *ctx);
/* Number of distinct schemas held (for tests and diagnostics). */
KVMSTATS_API size_t kvmstats_ctx__schema_count(const struct kvmstats_ctx *ctx);

/* ---------------------------------------------------------------------
 * Schema: the parsed, validated header, id and descriptors of one stats
 * file. Immutable and reference counted; shared between readers.
 */
struct kvmstats_schema;
struct kvmstats_stat;

/* Parse a whole image @buf (offset 0 to EOF). Runs every rule of
 * kvmstats_image__validate() and rejects the image on any error (warnings,
 * such as a type this library does not know, are accepted); errbuf (may
 * be NULL) gets a one-line reason. Two images whose header layout and
 * descriptor blocks are byte-identical get the same schema from @ctx. The
 * id string is not part of the schema (see kvmstats_reader__id()). */
KVMSTATS_API struct kvmstats_schema *
kvmstats_schema__parse(struct kvmstats_ctx *ctx, const void *buf, size_t len,
		       char *errbuf, size_t errbuf_sz);
KVMSTATS_API struct kvmstats_schema *
kvmstats_schema__get(struct kvmstats_schema *s);
KVMSTATS_API void kvmstats_schema__put(struct kvmstats_schema *s);

KVMSTATS_API uint32_t
kvmstats_schema__num_stats(const struct kvmstats_schema *s);
/* Bytes of data block the descriptors cover (a sample's size). */
KVMSTATS_API size_t kvmstats_schema__data_size(const struct kvmstats_schema *s);
/* Offset of the data block in the file. */
KVMSTATS_API uint32_t
kvmstats_schema__data_offset(const struct kvmstats_schema *s);
KVMSTATS_API const struct kvmstats_stat *
kvmstats_schema__stat(const struct kvmstats_schema *s, uint32_t idx);
/* Lookup by name; NULL (errno ENOENT) if absent. */
KVMSTATS_API const struct kvmstats_stat *
kvmstats_schema__find(const struct kvmstats_schema *s, const char *name);
/* Iteration: NULL prev gives the first stat. */
KVMSTATS_API const struct kvmstats_stat *
kvmstats_schema__next(const struct kvmstats_schema *s,
		      const struct kvmstats_stat *prev);
#define kvmstats_schema__for_each(pos, s)                                      \
	for ((pos) = kvmstats_schema__next((s), NULL); (pos);                  \
	     (pos) = kvmstats_schema__next((s), (pos)))

KVMSTATS_API const char *kvmstats_stat__name(const struct kvmstats_stat *st);
KVMSTATS_API uint32_t kvmstats_stat__index(const struct kvmstats_stat *st);
KVMSTATS_API uint32_t kvmstats_stat__flags(const struct kvmstats_stat *st);
KVMSTATS_API unsigned int kvmstats_stat__type(const struct kvmstats_stat *st);
KVMSTATS_API unsigned int kvmstats_stat__unit(const struct kvmstats_stat *st);
KVMSTATS_API unsigned int kvmstats_stat__base(const struct kvmstats_stat *st);
KVMSTATS_API int kvmstats_stat__exponent(const struct kvmstats_stat *st);
/* Number of u64 values (1 for scalars, buckets for histograms). */
KVMSTATS_API uint32_t kvmstats_stat__size(const struct kvmstats_stat *st);
/* Byte offset of the first value inside the data block. */
KVMSTATS_API uint32_t kvmstats_stat__offset(const struct kvmstats_stat *st);
KVMSTATS_API uint32_t
kvmstats_stat__bucket_size(const struct kvmstats_stat *st);
/* True when type/unit/base are ones this library knows; other values are
 * kept raw and shown as numbers. */
KVMSTATS_API bool kvmstats_stat__known(const struct kvmstats_stat *st);
/* The stat's values inside a data block (no copy). */
KVMSTATS_API const uint64_t *kvmstats_stat__values(const struct kvmstats_stat *st,
						   const void *data);

/* ---------------------------------------------------------------------
 * Values: units and histograms.
 */

/* Multiply a raw value by 10^exp or 2^exp: the value in base units
 * (seconds, bytes, cycles). */
KVMSTATS_API double kvmstats_stat__scale(const struct kvmstats_stat *st,
					 double raw);

/* Human form of a raw value in the stat's unit, e.g. "1.25 s", "4.0 MiB",
 * "yes". Returns the length snprintf would have written. */
KVMSTATS_API int kvmstats_stat__format(const struct kvmstats_stat *st,
				       double raw, char *buf, size_t len);
/* Same for an already-scaled value of a given unit. */
KVMSTATS_API int kvmstats_format_unit(unsigned int unit, double value,
				      char *buf, size_t len);

/* Bucket i of a histogram covers raw values [lo, hi) (hi = +inf for the
 * last bucket). Log2 histograms: bucket 0 holds 0, bucket i >= 1 holds
 * [2^(i-1), 2^i). Linear: [i*bucket_size, (i+1)*bucket_size). */
KVMSTATS_API int kvmstats_hist__bucket_bounds(const struct kvmstats_stat *st,
					      uint32_t i, double *lo,
					      double *hi);
/* The number of values in the histogram; UINT64_MAX when the buckets add
 * up to that or more (never a wrapped sum). */
KVMSTATS_API uint64_t kvmstats_hist__count(const struct kvmstats_stat *st,
					   const uint64_t *buckets);
/* Estimate the q-quantile (0..1) in raw units, interpolating linearly
 * inside the bucket (a bucket that holds one value, as log2 bucket 0
 * holds 0, gives that value); NAN when the histogram is empty. */
KVMSTATS_API double kvmstats_hist__quantile(const struct kvmstats_stat *st,
					    const uint64_t *buckets, double q);

/* Intervals: what changed between two data blocks of one schema taken
 * @dt_ns apart. For a cumulative stat, the increase per second (a counter
 * that went down, e.g. a new VM behind a reused id, gives NAN); for any
 * other type NAN: instant and peak stats are levels, not rates. */
KVMSTATS_API double kvmstats_stat__rate(const struct kvmstats_stat *st,
					const void *prev, const void *cur,
					uint64_t dt_ns);
/* The interval's histogram: cur - prev per bucket (0 where it went
 * down). @out has kvmstats_stat__size() entries. */
KVMSTATS_API void kvmstats_hist__delta(const struct kvmstats_stat *st,
				       const void *prev, const void *cur,
				       uint64_t *out);

/* ---------------------------------------------------------------------
 * Validation: every rule of the interface, as findings (never asserts).
 */
enum kvmstats_severity {
	KVMSTATS_SEV_ERROR,
	KVMSTATS_SEV_WARNING,
};

struct kvmstats_finding {
	const char *rule;	/* stable rule name, e.g. "desc.name.unique" */
	enum kvmstats_severity severity;
	int32_t stat;		/* descriptor index, or -1 */
	char msg[160];
};

struct kvmstats_report;

KVMSTATS_API struct kvmstats_report *kvmstats_report__new(void);
KVMSTATS_API void kvmstats_report__free(struct kvmstats_report *r);
/* Report flags (kvmstats_report__set_flags()). */
enum kvmstats_report_flags {
	/* Hold images to the ABI this library knows, as the kernel's selftest
	 * kvm_binary_stats_test does: a type, unit or base past the known
	 * ones (desc.type.known, desc.unit.known, desc.base.known) and an id
	 * anywhere but right after the 24-byte header (id.offset) are errors.
	 * Without it they are warnings, as a newer kernel may send them; the
	 * parser always reads that way and keeps such stats raw. */
	KVMSTATS_REPORT_STRICT = 1u << 0,
};

/* Set the flags the checks appending to @r follow; returns 0, or -EINVAL
 * for an unknown flag. */
KVMSTATS_API int kvmstats_report__set_flags(struct kvmstats_report *r,
					    unsigned int flags);
KVMSTATS_API size_t kvmstats_report__count(const struct kvmstats_report *r);
KVMSTATS_API size_t kvmstats_report__errors(const struct kvmstats_report *r);
KVMSTATS_API const struct kvmstats_finding *
kvmstats_report__finding(const struct kvmstats_report *r, size_t i);

/* Check an image (header through data; @len is the file size) against
 * every rule (what only a newer kernel may send is an error when @r is
 * KVMSTATS_REPORT_STRICT, else a warning). Appends findings to @r; returns
 * the number of errors found, or a negative errno when the check itself
 * could not run. */
KVMSTATS_API int kvmstats_image__validate(const void *buf, size_t len,
					  struct kvmstats_report *r);

/* Add a finding of the caller's own (e.g. a rule checked elsewhere);
 * @rule must outlive @r. */
KVMSTATS_API void kvmstats_report__add(struct kvmstats_report *r,
				       enum kvmstats_severity sev,
				       const char *rule, int32_t stat,
				       const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* True when @r has an error finding for @rule. */
KVMSTATS_API bool kvmstats_report__failed(const struct kvmstats_report *r,
					  const char *rule);

/* Every rule with a one-line description; the list ends with a NULL name.
 * Image rules apply to any image; live rules (live = true) to a stats fd
 * (kvmstats_fd__check()). */
struct kvmstats_rule {
	const char *name;
	const char *desc;
	bool live;
};
KVMSTATS_API const struct kvmstats_rule *kvmstats_rules(void);

/* Conformance of a live stats fd: every image rule on what it returns,
 * plus reads at odd offsets and lengths, EOF, and that cumulative and peak
 * stats never go down between two reads. Findings go to @r; returns the
 * number of errors or a negative errno. */
KVMSTATS_API int kvmstats_fd__check(int fd, struct kvmstats_report *r);
/* Two fds of one target (a dup, a second KVM_GET_STATS_FD) must return
 * the same header, id and descriptors; a failure is filed under @rule. */
KVMSTATS_API int kvmstats_fd__compare(int fd_a, int fd_b, const char *rule,
				      struct kvmstats_report *r);

/* ---------------------------------------------------------------------
 * Encoding: the producer side, as the kernel's kvm_stats_read() does.
 */
struct kvmstats_encode_desc {
	const char *name;
	uint32_t flags;		/* KVMSTATS_FLAGS(type, unit, base) */
	int16_t exponent;
	uint16_t size;		/* number of u64 values; 0 means 1 */
	uint32_t bucket_size;
};

struct kvmstats_encode_opts {
	size_t sz;
	uint32_t name_size;	/* 0: KVM_STATS_NAME_SIZE (48) */
	uint32_t header_flags;
};

/* Build an image of @n descriptors and their @values (concatenated u64s,
 * in descriptor order) with id @id. Returns a malloc'ed buffer and its
 * size in *len, or NULL with errno set. */
KVMSTATS_API void *kvmstats_image__encode(const char *id,
					  const struct kvmstats_encode_desc *d,
					  size_t n, const uint64_t *values,
					  size_t *len,
					  const struct kvmstats_encode_opts *opts);

/* Copy what a read of @count bytes at @pos would return from an image of
 * @len bytes (short at EOF, 0 past it), as a stats fd's read does. */
KVMSTATS_API ssize_t kvmstats_image__pread(const void *image, size_t len,
					   void *buf, size_t count, off_t pos);

/* ---------------------------------------------------------------------
 * Samples: caller-owned memory for one reading of one target.
 */
struct kvmstats_sample {
	uint64_t time_ns;	/* CLOCK_MONOTONIC when read; 0 if not taken */
	size_t size;		/* bytes of data */
	uint64_t *data;		/* the data block, as the kernel lays it out */
};

/* Allocate a sample fit for @s (free with kvmstats_sample__free). */
KVMSTATS_API struct kvmstats_sample *
kvmstats_sample__new(const struct kvmstats_schema *s);
KVMSTATS_API void kvmstats_sample__free(struct kvmstats_sample *smp);

/* ---------------------------------------------------------------------
 * Reader: one target (a VM or a vCPU) and its source of data.
 */
struct kvmstats_reader;

enum kvmstats_reader_flags {
	/* Take ownership of the fd: closed by kvmstats_reader__close(). */
	KVMSTATS_READER_OWN_FD = 1u << 0,
	/* Do not take a timestamp per read (the caller stamps a sweep). */
	KVMSTATS_READER_NO_TIME = 1u << 1,
};

struct kvmstats_reader_opts {
	size_t sz;
	unsigned int flags;
	char *errbuf;		/* optional: one-line reason for a failure */
	size_t errbuf_sz;
};

/* Open a reader on a stats fd: reads header, id and descriptors once. */
KVMSTATS_API struct kvmstats_reader *
kvmstats_reader__open_fd(struct kvmstats_ctx *ctx, int fd,
			 const struct kvmstats_reader_opts *opts);
/* Open a reader on an image in memory (copied). */
KVMSTATS_API struct kvmstats_reader *
kvmstats_reader__open_mem(struct kvmstats_ctx *ctx, const void *buf,
			  size_t len, const struct kvmstats_reader_opts *opts);
/* Open a reader on an image file (read whole, size bounded). */
KVMSTATS_API struct kvmstats_reader *
kvmstats_reader__open_file(struct kvmstats_ctx *ctx, const char *path,
			   const struct kvmstats_reader_opts *opts);

/* Source-provided readers (QMP, libvirt, debugfs, ...) plug in here. */
struct kvmstats_reader_ops {
	const char *source;	/* "qmp", "debugfs", ... */
	/* Fill smp->data (schema's layout). May set bits in @missing (one
	 * bit per stat index) for stats the source could not provide. */
	int (*read)(void *priv, struct kvmstats_sample *smp, uint64_t *missing);
	void (*close)(void *priv);
	/* Optional: age in ns of the data the last read returned. */
	uint64_t (*age_ns)(void *priv);
};
KVMSTATS_API struct kvmstats_reader *
kvmstats_reader__open_ops(struct kvmstats_schema *schema,
			  const struct kvmstats_reader_ops *ops, void *priv);

KVMSTATS_API void kvmstats_reader__close(struct kvmstats_reader *r);

/* One reading into @smp (allocated for this reader's schema). For an fd
 * this is exactly one pread of the data block. */
KVMSTATS_API int kvmstats_reader__read(struct kvmstats_reader *r,
				       struct kvmstats_sample *smp);
KVMSTATS_API struct kvmstats_schema *
kvmstats_reader__schema(const struct kvmstats_reader *r);
/* The target's id string, e.g. "kvm-1234/vcpu-0". */
KVMSTATS_API const char *kvmstats_reader__id(const struct kvmstats_reader *r);
KVMSTATS_API int kvmstats_reader__fd(const struct kvmstats_reader *r);
KVMSTATS_API const char *
kvmstats_reader__source(const struct kvmstats_reader *r);
/* Bitmap (one bit per stat) of stats missing from the last read, or NULL
 * when the source provides every stat. */
KVMSTATS_API const uint64_t *
kvmstats_reader__missing(const struct kvmstats_reader *r);
/* Did the last read give none of the target's cumulative counters (a
 * locked-down kernel refuses every debugfs counter file)? Such a reading
 * is a failed one: nothing in it may be shown as a rate or a 0. */
KVMSTATS_API bool kvmstats_reader__no_counter(const struct kvmstats_reader *r);
/* Sweeps: a reader also owns two samples, allocated when it was opened,
 * so that a host-wide sweep allocates nothing. kvmstats_reader__sweep()
 * makes the current sample the previous one and reads a new current,
 * stamped @time_ns for an fd; a source that serves older data (QMP,
 * libvirt: a background poll) or takes time to read (debugfs) stamps the
 * sample with its data's own time, so that rates over cur and prev are
 * right whatever the source. */
KVMSTATS_API int kvmstats_reader__sweep(struct kvmstats_reader *r,
					uint64_t time_ns);
/* Latest and previous readings (NULL before the first/second sweep). */
KVMSTATS_API const struct kvmstats_sample *
kvmstats_reader__cur(const struct kvmstats_reader *r);
KVMSTATS_API const struct kvmstats_sample *
kvmstats_reader__prev(const struct kvmstats_reader *r);
/* Result of the last sweep: 0 or a negative errno. */
KVMSTATS_API int kvmstats_reader__error(const struct kvmstats_reader *r);
/* Age in ns of data a background source (QMP, libvirt) served at the last
 * sweep; 0 for sources read synchronously. */
KVMSTATS_API uint64_t kvmstats_reader__age_ns(const struct kvmstats_reader *r);

/* Read the whole file again (header to EOF) into a malloc'ed buffer, for
 * saving images. */
KVMSTATS_API void *kvmstats_reader__image(struct kvmstats_reader *r,
					  size_t *len);

/* ---------------------------------------------------------------------
 * VMM processes: the stats fds a process already holds.
 */

/* Kind of an fd, from its /proc/PID/fd link. */
enum kvmstats_fd_kind {
	KVMSTATS_FD_OTHER,
	KVMSTATS_FD_VM,		/* anon_inode:kvm-vm */
	KVMSTATS_FD_VCPU,	/* anon_inode:kvm-vcpu:N */
	KVMSTATS_FD_VM_STATS,	/* anon_inode:kvm-vm-stats */
	KVMSTATS_FD_VCPU_STATS,	/* anon_inode:kvm-vcpu-stats:N */
};

/* Classify a /proc/PID/fd link target; *index gets N for vCPU kinds. */
KVMSTATS_API enum kvmstats_fd_kind kvmstats_fd_kind(const char *link,
						    int *index);

struct kvmstats_proc_fd {
	int fd;			/* number in the VMM */
	enum kvmstats_fd_kind kind;
	int index;		/* vCPU index, or -1 */
};

/* List the KVM fds of @pid (sorted by fd number) into a malloc'ed array.
 * Returns the count or a negative errno (-ESRCH: no such process). */
KVMSTATS_API int kvmstats_proc__kvm_fds(pid_t pid,
					struct kvmstats_proc_fd **out);
/* Name of a VMM: QEMU's -name guest=X / -name X, else comm. */
KVMSTATS_API int kvmstats_proc__name(pid_t pid, char *buf, size_t len);

struct kvmstats_vmm;	/* one VMM process and the VMs it holds */
struct kvmstats_vm;	/* one VM: its stats reader and its vCPUs' */

struct kvmstats_vmm_opts {
	size_t sz;
	char *errbuf;
	size_t errbuf_sz;
};

/* Acquire (pidfd_open + pidfd_getfd) every stats fd @pid holds and open
 * readers on them. vCPU stats fds belong to the VM stats fd before them
 * in fd order. Fails with -ENOENT when the process holds none. */
KVMSTATS_API struct kvmstats_vmm *
kvmstats_vmm__open(struct kvmstats_ctx *ctx, pid_t pid,
		   const struct kvmstats_vmm_opts *opts);
KVMSTATS_API void kvmstats_vmm__close(struct kvmstats_vmm *v);
KVMSTATS_API pid_t kvmstats_vmm__pid(const struct kvmstats_vmm *v);
KVMSTATS_API const char *kvmstats_vmm__name(const struct kvmstats_vmm *v);
/* The pidfd: readable (POLLIN) once the process exited. */
KVMSTATS_API int kvmstats_vmm__pidfd(const struct kvmstats_vmm *v);
/* True while the process lives (polls the pidfd, never blocks). */
KVMSTATS_API bool kvmstats_vmm__alive(const struct kvmstats_vmm *v);
KVMSTATS_API size_t kvmstats_vmm__num_vms(const struct kvmstats_vmm *v);
KVMSTATS_API struct kvmstats_vm *kvmstats_vmm__vm(const struct kvmstats_vmm *v,
						  size_t i);

/* Build a VMM object from readers the caller opened by other means (a
 * source, an image). Takes ownership of the readers passed to add_*(). */
KVMSTATS_API struct kvmstats_vmm *kvmstats_vmm__new(pid_t pid,
						    const char *name);
KVMSTATS_API struct kvmstats_vm *kvmstats_vmm__add_vm(struct kvmstats_vmm *v,
						      struct kvmstats_reader *r);
KVMSTATS_API int kvmstats_vm__add_vcpu(struct kvmstats_vm *vm, int index,
				       struct kvmstats_reader *r);

/* Which source serves this VMM: "fd", "attach", "qmp", ... */
KVMSTATS_API const char *kvmstats_vmm__source(const struct kvmstats_vmm *v);
/* Unique within a host object for its life: never reused, unlike pids. */
KVMSTATS_API uint64_t kvmstats_vmm__uid(const struct kvmstats_vmm *v);
/* Guest memory in bytes when a source knows it, else 0. */
KVMSTATS_API uint64_t kvmstats_vmm__memory_bytes(const struct kvmstats_vmm *v);
/* A VMM opened by the attach source (it then reports source "fd"): how
 * long its threads were held stopped, over the open and every refresh
 * that attached new vCPUs. *max_ns gets the longest single hold and
 * *total_ns their sum (either may be NULL). Returns the number of holds,
 * or -ENOENT (errno too) when @v was not opened by the attach source. */
KVMSTATS_API int kvmstats_vmm__attach_hold_ns(const struct kvmstats_vmm *v,
					      uint64_t *max_ns,
					      uint64_t *total_ns);

KVMSTATS_API struct kvmstats_reader *
kvmstats_vm__reader(const struct kvmstats_vm *vm);
KVMSTATS_API size_t kvmstats_vm__num_vcpus(const struct kvmstats_vm *vm);
KVMSTATS_API struct kvmstats_reader *
kvmstats_vm__vcpu(const struct kvmstats_vm *vm, size_t i, int *index);

/* Each level of a VM's stats is served by its own source: a QEMU 8.1+
 * holds its vCPUs' stats fds but not its VM's, so the vCPUs are read from
 * those ("fd") and the VM stats from another source ("attach", "qmp",
 * "libvirt", "debugfs"). */
enum kvmstats_level {
	KVMSTATS_LEVEL_VM = 0,
	KVMSTATS_LEVEL_VCPU = 1,
};
/* The source that serves @level of @vm: "fd", "attach" (stats fds the
 * VMM was made to open), "qmp", "libvirt" or "debugfs"; NULL when no
 * source serves it (the VM has no VM reader, or no vCPU). */
KVMSTATS_API const char *kvmstats_vm__source(const struct kvmstats_vm *vm,
					     enum kvmstats_level level);
/* Why @level of @vm has no source ("" when it has one): every source
 * that was tried, and what it said. */
KVMSTATS_API const char *kvmstats_vm__why_none(const struct kvmstats_vm *vm,
					       enum kvmstats_level level);

/* What the qmp source learnt of a VMM it reads (at any level). */
struct kvmstats_qmp_info {
	size_t sz;			/* sizeof(struct kvmstats_qmp_info) */
	char qemu_version[32];		/* "10.0.2", from QMP's greeting */
	/* QEMU lists multi-value stats (histograms) last element first;
	 * the qmp source puts them back in the kernel's order. */
	bool hist_reversed;
	/* How that order is known: "kernel" (a histogram of QEMU's compared
	 * with the kernel's stats fd of the same vCPU, once per QEMU binary),
	 * "version" (the known order of this QEMU release), "assumed" (a
	 * release newer than those known: taken as the last known). */
	const char *hist_order_from;
	char socket[256];		/* the monitor's socket, as named */
};
/* Fill @info (its sz set by the caller) for a VMM the qmp source reads;
 * -ENOENT (errno too) when no level of @v is read over QMP. */
KVMSTATS_API int kvmstats_vmm__qmp_info(const struct kvmstats_vmm *v,
					struct kvmstats_qmp_info *info);

/* ---------------------------------------------------------------------
 * Host: every VMM on the machine, each served by the best source, kept up
 * to date as VMMs come and go and vCPUs are hot-added.
 *
 * Sources, best first: "fd" (stats fds the VMM holds), "attach" (opt-in:
 * the VMM is made to open stats fds for us), "qmp" (QEMU's query-stats),
 * "libvirt", "debugfs". "auto" picks the best that works per VMM.
 */
struct kvmstats_host;

enum kvmstats_host_flags {
	/* Allow the attach source (ptrace; see kvmstats(1)). */
	KVMSTATS_HOST_ATTACH = 1u << 0,
	/* Attach even to a VMM with a seccomp filter. */
	KVMSTATS_HOST_FORCE = 1u << 1,
};

struct kvmstats_host_opts {
	size_t sz;
	const pid_t *pids;	/* only these VMMs (NULL: every VMM) */
	size_t npids;
	const char *source;	/* NULL or "auto", or one source name */
	unsigned int flags;	/* enum kvmstats_host_flags */
	const char *qmp_path;	/* QMP socket of the (single) VMM in pids */
	const char *libvirt_uri;	/* NULL: qemu:///system */
	unsigned int timeout_ms;	/* per QMP/libvirt exchange; 0: 1000 */
};

KVMSTATS_API struct kvmstats_host *
kvmstats_host__new(struct kvmstats_ctx *ctx,
		   const struct kvmstats_host_opts *opts);
KVMSTATS_API void kvmstats_host__free(struct kvmstats_host *h);
/* Rescan: open new VMMs and new vCPUs, drop VMMs that exited (closing
 * their fds at once). Pointers to dropped VMMs become invalid: key any
 * state of your own by kvmstats_vmm__uid(). Returns the number of VMMs
 * added or dropped, or a negative errno. */
KVMSTATS_API int kvmstats_host__refresh(struct kvmstats_host *h);
/* Drop VMMs that exited, then sweep every reader once (same timestamp).
 * Returns the number of readers whose read failed (their previous
 * readings are kept; see kvmstats_reader__error()). */
KVMSTATS_API int kvmstats_host__sweep(struct kvmstats_host *h);
KVMSTATS_API uint64_t kvmstats_host__time_ns(const struct kvmstats_host *h);
/* The same sweep spread over @threads threads (0: one per online CPU),
 * for hosts with thousands of readers. The threads are started at the
 * first call, kept with the host for the next sweeps (a call with another
 * count replaces them) and stopped by kvmstats_host__free(); they block
 * every signal. A host with few readers is swept by the calling thread
 * alone. Returns the number of failed readers, or a negative errno. */
KVMSTATS_API int kvmstats_host__sweep_parallel(struct kvmstats_host *h,
					       unsigned int threads);
/* Time the last kvmstats_host__sweep_parallel() spent reading the readers
 * of @source ("fd", "qmp", ...), in ns summed over its threads. */
KVMSTATS_API uint64_t kvmstats_host__sweep_ns(const struct kvmstats_host *h,
					      const char *source);
/* Threads the parallel sweeps use (0 before the first one). */
KVMSTATS_API unsigned int
kvmstats_host__sweep_threads(const struct kvmstats_host *h);
KVMSTATS_API size_t kvmstats_host__num_vmms(const struct kvmstats_host *h);
KVMSTATS_API struct kvmstats_vmm *
kvmstats_host__vmm(const struct kvmstats_host *h, size_t i);
/* Why a requested VMM could not be opened at the last refresh, one line
 * per failure ("" when none). */
KVMSTATS_API const char *kvmstats_host__errors(const struct kvmstats_host *h);

/*
 * Refresh in steps, for callers that must not wait while a VMM is opened
 * (a QMP monitor that never answers costs the timeout of each exchange):
 *
 *   kvmstats_host__update()   drop VMMs that exited, add hot-added vCPUs
 *   kvmstats_host__pending()  claim the VMMs to open now (a scan of /proc)
 *   kvmstats_host__prepare()  open one (slow; on any thread)
 *   kvmstats_host__insert()   add it to the host, or note its failure (fast)
 *
 * update, pending and insert use the host like every other call (one
 * thread at a time). prepare reads only what does not change after
 * kvmstats_host__new() and the context's caches (which are locked), so
 * it may run on other threads, several at once, while the host's thread
 * sweeps and reads. kvmstats_host__refresh() is these steps in a row.
 */
/* Drop VMMs that exited and add the vCPUs (and VMs) of open VMMs that
 * appeared. Returns how many VMMs were dropped. */
KVMSTATS_API int kvmstats_host__update(struct kvmstats_host *h);
/* Claim the VMMs that are not open, not claimed and not in back-off
 * after a failure: at most one per family (a VMM and the VMMs it forked),
 * and no more than @max claims in flight (0: no bound). Their pids go to
 * *pids (malloc'ed; NULL when none). Each must be given back with
 * kvmstats_host__insert(), opened or not. Resets kvmstats_host__errors().
 * Returns how many, or a negative errno. */
KVMSTATS_API int kvmstats_host__pending(struct kvmstats_host *h, size_t max,
					pid_t **pids);
/* The same among @cand (@n pids of kvmstats_proc__vmm_pids(), which a
 * program may run on another thread: its scan of /proc is the slow part
 * of kvmstats_host__pending() on a host of many processes). A host made
 * with pids claims among those and ignores @cand. */
KVMSTATS_API int kvmstats_host__pending_among(struct kvmstats_host *h,
					      const pid_t *cand, size_t n,
					      size_t max, pid_t **pids);
/* Open @pid as the host would (its sources and options); NULL with errno
 * set and the reason in @errbuf when no source can. */
KVMSTATS_API struct kvmstats_vmm *
kvmstats_host__prepare(const struct kvmstats_host *h, pid_t pid, char *errbuf,
		       size_t errbuf_sz);
/* Give back claimed @pid: @v (prepared, or NULL when the open failed with
 * reason @why after @took_ns) is the host's from now on. A failure backs
 * the family off (a delay doubling up to a minute). Returns 1 when @v was
 * added, 0 when not (a failure, or it exited meanwhile), or a negative
 * errno (-ENOENT: @pid was not claimed; @v is freed). */
KVMSTATS_API int kvmstats_host__insert(struct kvmstats_host *h, pid_t pid,
				       struct kvmstats_vmm *v, const char *why,
				       uint64_t took_ns);

/* Names of every source, in order of preference (NULL-terminated). */
KVMSTATS_API const char *const *kvmstats_sources(void);
/* Can @source serve @pid now? (cheap, no VMM is disturbed) */
KVMSTATS_API bool kvmstats_source__probe(struct kvmstats_ctx *ctx,
					 const char *source, pid_t pid,
					 const struct kvmstats_host_opts *opts);
/* Every process that holds a KVM VM fd (a VMM), sorted; malloc'ed. */
KVMSTATS_API int kvmstats_proc__vmm_pids(pid_t **out);

#ifdef __cplusplus
}
#endif

#endif /* KVMSTATS_H */
