/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libkvmstats: the drain of a host. Every VM of it live-migrated away, a
 * few at a time, through one shared link: in which order, when each
 * migration starts and ends, the bandwidth each gets, the total time, and
 * the VMs that will not leave.
 *
 * The schedule is an event simulation. While k migrations run, each gets
 * min(its own max-bandwidth, the rate at which QEMU tests its pages for
 * zero before it sends them, its fair share of the link), what one leaves
 * unused shared among the others (max-min fairness, as TCP flows through
 * one bottleneck settle). At each start and finish (and at the end of a
 * pass the zero test paced: the next one tests fewer pages per byte) the
 * shares change, and
 * each running VM goes on with QEMU's pre-copy (kvmstats_migrate__predict's
 * model, pass by pass) at its new bandwidth: the pass under way finishes
 * at the new rate, the next one sends what the guest dirtied meanwhile,
 * and the stop-and-copy threshold is the new bandwidth x downtime-limit.
 * So a VM that converges alone may not converge at a share, and one that
 * does not converge may once the others are gone. A migration that has
 * not completed after abort_s_per_gib seconds per GiB of the VM's memory
 * is aborted (KubeVirt's completionTimeoutPerGiB: 150 s by default).
 *
 * Conventions are those of kvmstats.h: opaque objects, 0/-errno returns,
 * NULL + errno, no printing.
 */
#ifndef KVMSTATS_DRAIN_H
#define KVMSTATS_DRAIN_H

#include "kvmstats_mem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One VM to move. */
struct kvmstats_drain_vm {
	pid_t pid;		/* its id in the output */
	const char *name;	/* may be NULL; copied */
	uint64_t memory_bytes;	/* for the abort rule and largest-first */
	/* The per-VM model's inputs: pages and the dirty curve (its points'
	 * pages, and lo/hi for the interval), and walk_rate: the bytes of
	 * pages QEMU tests for zero per second, all its testers together
	 * (0: not modelled). bandwidth and downtime_s are ignored: the
	 * schedule gives the bandwidth, the next two fields the rest. */
	struct kvmstats_migrate_input model;
	double max_bandwidth;	/* its own max-bandwidth, bytes/s */
	double downtime_s;	/* its downtime-limit; 0: QEMU's default */
	double setup_s;		/* time beyond its bytes (setup, switch-over) */
};

enum kvmstats_drain_order {
	KVMSTATS_DRAIN_ORDER_PLAN,		/* the shortest drain */
	KVMSTATS_DRAIN_ORDER_LARGEST_FIRST,	/* by memory, largest first */
	KVMSTATS_DRAIN_ORDER_SMALLEST_FIRST,	/* by memory, smallest first */
};

/* How the order was found. */
enum kvmstats_drain_search {
	KVMSTATS_DRAIN_EXHAUSTIVE,	/* every order tried (up to 8 VMs) */
	KVMSTATS_DRAIN_GREEDY,		/* longest first, then pair swaps */
	KVMSTATS_DRAIN_FIXED,		/* largest- or smallest-first asked */
};

/* Up to this many VMs the plan's order tries every order. */
#define KVMSTATS_DRAIN_EXHAUSTIVE_MAX 8

struct kvmstats_drain_opts {
	size_t sz;
	double link;		/* bytes/s the drain may use in total; > 0 */
	uint32_t parallel;	/* migrations at a time; 0: 2 (KubeVirt's) */
	enum kvmstats_drain_order order;
	double abort_s_per_gib;	/* 0: 150; < 0: never abort */
};

/* What limits a migration's bandwidth. */
enum kvmstats_drain_limit {
	KVMSTATS_DRAIN_BY_NONE,		/* setting up: no bandwidth used */
	KVMSTATS_DRAIN_BY_OWN,		/* its own max-bandwidth */
	KVMSTATS_DRAIN_BY_LINK,		/* its share of the link */
	KVMSTATS_DRAIN_BY_WALK,		/* QEMU's zero test of its pages (the CPU) */
};

/* A stretch of a migration at one bandwidth. */
struct kvmstats_drain_seg {
	double from_s, to_s;
	double bandwidth;		/* bytes/s */
	enum kvmstats_drain_limit by;
};

#define KVMSTATS_DRAIN_MAX_SEGS 16

/* One VM in the schedule (times since the drain began). */
struct kvmstats_drain_slot {
	size_t index;			/* in the caller's array */
	pid_t pid;
	char name[128];
	uint32_t position;		/* 1: first started */
	double start_s, end_s;		/* end: gone, or aborted */
	double seconds;			/* end - start */
	double end_lo_s, end_hi_s;	/* end at the dirty curve's lo and hi */
	/* Sent under the schedule, and its passes (until aborted). One that
	 * neither converges nor is aborted never ends (end_s infinite):
	 * then what it had sent when the schedule stopped, no prediction. */
	uint64_t bytes;
	uint32_t passes;
	bool converges;			/* under the schedule */
	bool uncertain;			/* lo and hi curves disagree on it */
	bool aborted;			/* then end_s is the abort */
	double abort_after_s;		/* its abort rule; < 0: none */
	enum kvmstats_drain_limit limit;	/* what limited it most of the time */
	double min_share, max_share;	/* bytes/s it got */
	uint32_t nsegs;			/* at most KVMSTATS_DRAIN_MAX_SEGS kept */
	struct kvmstats_drain_seg segs[KVMSTATS_DRAIN_MAX_SEGS];
	/* Alone, at min(own max-bandwidth, link), without the abort rule
	 * (where it does not converge, its bytes and seconds are where the
	 * model gave up): */
	struct kvmstats_migrate_prediction alone;
	/* What would move one that does not converge alone (0: nothing
	 * found): the downtime-limit that would do (up to 60 s), and the
	 * dirty rate (bytes/s) under which it would converge (a quieter
	 * moment), beside the rate measured. */
	double downtime_needed_s;
	double quiet_dirty_bps, dirty_bps;
};

struct kvmstats_drain_result {
	double link;
	uint32_t parallel;
	double abort_s_per_gib;		/* < 0: never */
	enum kvmstats_drain_order order;
	enum kvmstats_drain_search search;
	uint64_t orders_tried;
	/* Until the last slot frees (aborted migrations included), and its
	 * interval (the schedule run at the dirty curves' lo and hi). */
	double total_s, total_lo_s, total_hi_s;
	/* Mean time until a VM is gone (the tie-break: smaller frees the
	 * host's capacity earlier). */
	double mean_end_s;
	size_t n;
	size_t not_converging;		/* aborted under the schedule */
	size_t uncertain;
};

struct kvmstats_drain;

/* Schedule @n VMs (each @vm_sz bytes apart: sizeof(struct
 * kvmstats_drain_vm) of the caller). NULL + errno: EINVAL on a bad
 * input (no link, n 0, a VM without bandwidth), ENOMEM. */
KVMSTATS_API struct kvmstats_drain *
kvmstats_drain__new(const struct kvmstats_drain_vm *vms, size_t n, size_t vm_sz,
		    const struct kvmstats_drain_opts *opts);
KVMSTATS_API void kvmstats_drain__free(struct kvmstats_drain *d);
KVMSTATS_API const struct kvmstats_drain_result *
kvmstats_drain__result(const struct kvmstats_drain *d);
/* The @i-th VM of the order (0: first started); NULL past the end. */
KVMSTATS_API const struct kvmstats_drain_slot *
kvmstats_drain__slot(const struct kvmstats_drain *d, size_t i);

/* "plan", "largest-first", "smallest-first"; and back (-EINVAL). */
KVMSTATS_API const char *kvmstats_drain_order_str(enum kvmstats_drain_order o);
KVMSTATS_API int kvmstats_drain_order_parse(const char *s);
/* "exhaustive", "greedy", "fixed". */
KVMSTATS_API const char *kvmstats_drain_search_str(enum kvmstats_drain_search s);
/* "setup", "own", "link". */
KVMSTATS_API const char *kvmstats_drain_limit_str(enum kvmstats_drain_limit l);

#ifdef __cplusplus
}
#endif

#endif /* KVMSTATS_DRAIN_H */
