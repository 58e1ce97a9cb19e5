/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Internal declarations of libkvmstats: never installed. */
#ifndef KVMSTATS_INTERNAL_H
#define KVMSTATS_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

#include "kvmstats.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Limits that keep a hostile image from costing more than its size. */
#define KS_MAX_NAME_SIZE 4096u		/* kernel: 48 */
#define KS_MAX_IMAGE (16u << 20)	/* a real image is a few KiB */
#define KS_MAX_DATA (1u << 20)		/* data block bytes */
#define KS_ABI_NAME_SIZE 48u		/* KVM_STATS_NAME_SIZE */

struct kvmstats_stat {
	uint32_t index;
	uint32_t flags;
	int16_t exponent;
	uint16_t size;
	uint32_t offset;
	uint32_t bucket_size;
	const char *name;
};

struct kvmstats_schema {
	atomic_int refs;
	struct kvmstats_ctx *ctx;	/* cache it lives in, or NULL */
	struct kvmstats_schema *next;	/* in ctx's cache */
	uint64_t hash;
	/* Key: the header with its id_offset, then the descriptor block. */
	unsigned char *key;
	size_t key_len;
	struct kvmstats_abi_header hdr;
	uint32_t num;
	struct kvmstats_stat *stats;
	uint32_t *by_name;		/* indexes sorted by name */
	char *names;
	size_t data_size;
};

struct kvmstats_ctx {
	kvmstats_log_fn log;
	void *log_arg;
	/* Guards the caches below: VMMs are opened on other threads
	 * (kvmstats_host__prepare()) while the host's thread reads. */
	pthread_mutex_t lock;
	struct kvmstats_schema *schemas;
	size_t nschemas;
	/* This kernel's own VM and vCPU descriptors, learnt once from a
	 * throwaway VM (ks_kernel_schemas()); kernel_err < 0 when that
	 * failed, so that it is not tried again. */
	struct kvmstats_schema *kernel_schema[2];
	int kernel_err;
	/* The order of QEMU's histogram lists, learnt per QEMU binary
	 * (qmp_order.c): a small ring, the oldest replaced. */
	struct ks_exe_order {
		uint64_t dev, ino, mtime_ns, size;
		bool reversed;
	} hist_order[16];
	unsigned int nhist_order;
};

/* A mutex that the sampling thread shares with threads of a lower
 * class (pollers, the threads that open VMMs): priority inheritance, so
 * that under `chrt -f` a holder preempted on a loaded host is run at
 * once instead of holding the sampler for as long as the scheduler keeps
 * it off a CPU. A plain mutex where the system has none. */
void ks_mutex_init_pi(pthread_mutex_t *mu);

/* Take and release @ctx's cache lock (no-ops for a NULL ctx). */
void ks_ctx_lock(struct kvmstats_ctx *ctx);
void ks_ctx_unlock(struct kvmstats_ctx *ctx);

/* ---- VMMs and VMs (vmm.c) ---- */
struct ks_vcpu_slot {
	int index;
	int remote_fd;			/* fd number in the VMM, or -1 */
	bool held;			/* remote_fd is a stats fd it holds */
	struct kvmstats_reader *r;
};

/* The levels of stats, each served by its own source (KVMSTATS_LEVEL_*). */
#define KS_LEVELS 2

struct kvmstats_vm {
	struct kvmstats_vmm *vmm;	/* the VMM it belongs to */
	struct kvmstats_reader *r;	/* NULL when only vCPU fds were found */
	int remote_fd;			/* the VMM's VM stats fd we copied, or -1 */
	int vm_fd;			/* the VMM's KVM VM fd, or -1: unknown */
	struct ks_vcpu_slot *vcpus;
	size_t nvcpus, cap;
	/* Which source serves each level (static names; NULL: none), and
	 * why a level has none ("" when it has one or was not looked for). */
	const char *level_src[KS_LEVELS];
	char why_none[KS_LEVELS][512];
};

struct kvmstats_vmm {
	pid_t pid;
	int pidfd;
	uint64_t uid;
	uint64_t memory_bytes;
	const char *source;		/* static string */
	const struct ks_source *src;	/* the source that opened it */
	char name[128];
	struct kvmstats_vm **vms;
	size_t nvms;
	void *priv;			/* the source's per-VMM state */
	void (*priv_free)(void *priv);
	/* State of another source that serves only the VM stats (a VMM
	 * that holds its vCPUs' stats fds and not its VM's). */
	const struct ks_source *vm_src;
	void *vm_priv;
	void (*vm_priv_free)(void *priv);
	struct kvmstats_host *host; /* the host it is in, or NULL */
};

int ks_vmm_pidfd_open(struct kvmstats_vmm *v);
/* fd source: take the stats fds the VMM holds that are not taken yet;
 * returns how many were added or -errno. */
int ks_vmm_take_held_fds(struct kvmstats_ctx *ctx, struct kvmstats_vmm *v);
int ks_vm_add_vcpu(struct kvmstats_vm *vm, int index, int remote_fd,
		   struct kvmstats_reader *r);
/* The VM a vCPU's fd belongs to: the VM whose KVM VM fd (vm_fd) comes
 * last before it in the VMM's fd order (VMMs create a VM, then its
 * vCPUs); the first VM when none comes before; NULL when there is no VM
 * yet. */
struct kvmstats_vm *ks_vmm_owner_vm(struct kvmstats_vmm *v, int fd);
/* The VM of the VMM's KVM VM fd @vm_fd, or NULL. */
struct kvmstats_vm *ks_vmm_vm_of_fd(const struct kvmstats_vmm *v, int vm_fd);
/* Give @v a source's state: the VMM's own source's, or (@vm_only) that of
 * the source serving only its VM stats. Freed with @v, after its VMs. */
void ks_vmm_set_priv(struct kvmstats_vmm *v, bool vm_only, void *priv,
		     void (*priv_free)(void *priv));

/* ---- stats fds taken from a VMM (stats_fd.c) ---- */
/* Is @fd (ours) KVM's stats fd of a VM (@vcpu < 0) or of vCPU @vcpu: a
 * file of the anon inode file system named "kvm-vm-stats" or
 * "kvm-vcpu-stats:VCPU"? 0, or -EBADF with the reason in @why. */
int ks_verify_stats_fd(int fd, int vcpu, char *why, size_t why_sz);
/* The same, of fd @fd of process @pid, by its /proc name only. */
bool ks_remote_is_stats(pid_t pid, int fd, int vcpu);
/* Close an fd that failed the check, never blocking the caller. */
void ks_drop_fd(int fd);
/* Read a small /proc file whole, NUL-terminated; bytes read or -errno. */
ssize_t ks_read_small(const char *path, char *buf, size_t len);
/* Is @pid a VMM, one that holds a KVM VM fd? 0; else -ENOENT (it holds
 * none: pid 1, a typo), -ESRCH (gone) or -errno, and why in @why. */
int ks_proc_vmm_check(pid_t pid, char *why, size_t why_sz);
/* How many CPUs @pid may run on (its affinity); or -errno. */
int ks_proc_cpus(pid_t pid);
int ks_proc_cpu_ns(pid_t pid, uint64_t *ns);
void ks_vm_free(struct kvmstats_vm *vm);

/* Give an ops reader (kvmstats_reader__open_ops) the id its target would
 * have in the kernel, e.g. "kvm-1234/vcpu-0"; 0 or -ENOMEM. */
int ks_reader_set_id(struct kvmstats_reader *r, const char *id);

/* ---- sources (host.c and source_*.c) ---- */
struct ks_source_args {
	struct kvmstats_ctx *ctx;
	const struct kvmstats_host_opts *opts;	/* all fields filled */
	char *errbuf;
	size_t errbuf_sz;
	/* Open for the VM stats only (another source reads the vCPUs):
	 * touch no vCPU, read none. Sources with .vm_level honour it. */
	bool vm_only;
};

/* A source fills a fresh VMM (pid, pidfd and name already set) with VMs
 * and vCPU readers, and later adds the vCPUs that appeared. */
struct ks_source {
	const char *name;
	/* Cheap: could this source serve the VMM? Never disturbs it. */
	bool (*probe)(const struct ks_source_args *a, pid_t pid);
	/* 0, or -errno with a reason in a->errbuf. */
	int (*open)(const struct ks_source_args *a, struct kvmstats_vmm *v);
	/* Optional: add hot-plugged vCPUs; returns how many or -errno. */
	int (*refresh)(const struct ks_source_args *a, struct kvmstats_vmm *v);
	/* Optional: the source its VMMs report (attach ends up with stats
	 * fds of our own: its readings are the fd source's). */
	const char *reads_as;
	/* Can serve the VM stats alone (with a->vm_only). */
	bool vm_level;
	/* Serves one VM per VMM (QEMU's monitor, libvirt): its VM is the
	 * VMM's only one; others say which VM fd each VM reader is of. */
	bool one_vm;
};

/* New references to this kernel's VM and vCPU stats schemas, read from
 * a VM and vCPU this process creates and closes at once (/dev/kvm), and
 * cached in @ctx (when not NULL); 0 or -errno. Sources that only know
 * stat names (debugfs, libvirt) take types and units from them. */
int ks_kernel_schemas(struct kvmstats_ctx *ctx, struct kvmstats_schema **vm,
		      struct kvmstats_schema **vcpu);

/* The UUID libvirt gave a QEMU (-uuid on its command line) and the
 * domain ID of the "domain-ID-NAME" directory it names (-1 when absent);
 * -ENOENT when there is no -uuid: libvirt did not start it
 * (source_libvirt.c, with libvirt only). */
int ks_libvirt_cmdline(pid_t pid, char *uuid, size_t len, long *dom_id);
/* Does the pid file libvirt keeps for domain @name (the system daemon's,
 * @uri qemu:///system) name another process than @pid (then *other)? */
bool ks_libvirt_pid_disagrees(const char *uri, const char *name, pid_t pid,
			      pid_t *other);

extern const struct ks_source ks_source_fd, ks_source_attach, ks_source_qmp,
	ks_source_libvirt, ks_source_debugfs;

struct kvmstats_host {
	struct kvmstats_ctx *ctx;
	struct kvmstats_host_opts o;
	pid_t *pids;
	const struct ks_source *only;	/* NULL: auto */
	struct kvmstats_vmm **vmms;
	size_t n;
	uint64_t next_uid;
	uint64_t time_ns;
	char errors[1024];
	/* Families of VMMs whose open failed, retried later, and the pids
	 * handed out to be opened (host.c). */
	struct ks_retry *retry;
	size_t nretry;
	struct ks_claim *claims;
	size_t nclaims;
	struct ks_sweep_pool *pool;	/* parallel sweeps (sweep.c), or NULL */
	/* Moves whenever a VMM, VM or reader may have come or gone (an
	 * insert, a drop, a source's refresh): what a caller keeps of the
	 * readers (log_sweep.c's list) holds while it stays. It starts at
	 * the time the host was made, so that another host made at the
	 * same address does not take a cache of this one for its own. */
	uint64_t gen;
};
/* Note that @h's set of VMMs, VMs or readers changed (NULL: none). */
static inline void ks_host_changed(struct kvmstats_host *h)
{
	if (h)
		h->gen++;
}

/* ---- parallel sweeps (sweep.c) ---- */
#define KS_SWEEP_NSRC 6			/* the five sources, and any other */
struct ks_sweep_pool;
void ks_sweep_pool_free(struct ks_sweep_pool *p);
/* Warm the cache lines a sweep of @r will touch, one link per @stage
 * (0: the reader, 1: its sample, 2: the data block) (reader.c). */
void ks_reader_prefetch(const struct kvmstats_reader *r, int stage);
/* Drop the VMMs that exited (host.c); returns how many. */
int ks_host_drop_dead(struct kvmstats_host *h);

/* Log through the context's callback (no-op when ctx or callback NULL). */
void ks_log(const struct kvmstats_ctx *ctx, enum kvmstats_log_level level,
	    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* snprintf into an optional buffer. */
void ks_err(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Reads the first @sz bytes of an opts struct of @max bytes into @out,
 * zero-filling the rest; fails when the caller's struct is bigger and its
 * tail (unknown to this version) is not zero. */
int ks_opts_copy(void *out, size_t max, const void *opts);

/* Validation core, shared by kvmstats_image__validate() and the parser:
 * appends findings to @r. */
int ks_check_image(const unsigned char *buf, size_t len,
		   struct kvmstats_report *r);
void ks_report_add(struct kvmstats_report *r, enum kvmstats_severity sev,
		   const char *rule, int32_t stat, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
#define ERR(r, rule, stat, ...)                                                \
	ks_report_add(r, KVMSTATS_SEV_ERROR, rule, stat, __VA_ARGS__)
#define WARN(r, rule, stat, ...)                                               \
	ks_report_add(r, KVMSTATS_SEV_WARNING, rule, stat, __VA_ARGS__)
/* Message of the first error finding in @r, or NULL. */
const struct kvmstats_finding *ks_report_first_error(const struct kvmstats_report *r);

/* Read a file or fd from offset 0 to EOF into a malloc'ed buffer of at
 * most KS_MAX_IMAGE bytes (-EFBIG past that). */
int ks_read_all_fd(int fd, unsigned char **out, size_t *len);

uint64_t ks_hash(const void *buf, size_t len);

static inline uint64_t ks_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* QEMU's pre-copy (migrate_model.c, shared with migrate_drain.c): its
 * rate limit is a budget per 100 ms window, the migration thread reads its
 * pending estimate once per window; the pages of the bitmap still set
 * when that estimate first falls under @thr pages, windows of @win pages
 * apart, which a sync of the bitmap keeps pending: at the end of the
 * first pass their mean (ks_mig_first_leftover, migrate_tail.c: of a
 * pass of @pages pages, @normal not zero, in @bytes, windows of @win
 * bytes; sets *left_bytes), after a sync that left @pages what whole
 * windows leave (ks_mig_round_leftover). */
#define KS_MIG_WINDOW_S 0.1
/* Syncs without a new low of the pending memory after which a migration
 * is called non-converging (the model's and the drain's rule). */
#define KS_MIG_STALLED 4
struct kvmstats_migrate_input;
double ks_mig_first_leftover(const struct kvmstats_migrate_input *in,
			     double pages, double normal, double bytes,
			     double thr, double win, double *left_bytes);
double ks_mig_round_leftover(double pages, double thr, double win);
bool ks_mig_new_low(double *low, unsigned int *stalled, double pend);
struct kvmstats_dirty_point;
/* migrate_model.c: the pages a guest writes to, read off its curve (@cap
 * where it does not level off); of @d pages it dirtied since a sync,
 * those not among the @left still pending (@left_dirtied: those are
 * dirtied pages, not pass 0's; @apart: the high bound's placement). */
double ks_mig_working_set(const struct kvmstats_dirty_point *c, uint32_t n,
			  double cap);
double ks_mig_newly_dirty(double d, double left, double ws, double cap,
			  bool left_dirtied, bool apart);
/* The curve's pages at @t, before its first point as a working set of
 * @ws pages fills (the model and the drain read it so). */
double ks_mig_dirtied_at(const struct kvmstats_dirty_point *c, uint32_t n,
			 double t, double ws, double cap);
/* migrate_verdict.c: where a curve's first points lie on one line
 * through 0, that line's points instead (their intervals its longest
 * point's). */
void ks_mig_fit_line(struct kvmstats_dirty_point *c, uint32_t n);

#endif
