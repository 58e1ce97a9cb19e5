/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The exporter's insides, shared by prom_model.c (which stats make which
 * families, the targets and their labels) and prom_text.c (numbers, and
 * the families as Prometheus text and OpenMetrics); the unit test and the
 * benchmark reach them too. Not for serve's other files: prom.h is.
 */
#ifndef KVMSTATS_PROM_INT_H
#define KVMSTATS_PROM_INT_H

#include <sys/types.h>

#include "prom.h"

/* How a raw value becomes base units: the descriptor's base and
 * exponent. */
enum scale_mode { SCALE_NONE, SCALE_POW10, SCALE_POW2 };

struct scale {
	uint8_t mode;
	int16_t exp;
};

enum fam_kind { FAM_COUNTER, FAM_GAUGE, FAM_BOOL, FAM_HIST };

/* One metric: a stat of one target. Offsets count u64 words. */
struct series {
	uint32_t target;
	uint32_t off;
	int32_t sum_off;	/* the histogram's sum stat, or -1 */
	uint32_t stat;		/* index, for the missing bitmap */
	uint32_t sum_stat;	/* the sum stat's index (sum_off >= 0) */
};

struct family {
	char *base;		/* OpenMetrics family name, e.g. kvm_vcpu_exits */
	enum fam_kind kind;
	bool vcpu;
	/* What makes two schemas' stats one family. */
	uint32_t flags;
	int16_t exp;
	uint16_t size;
	uint32_t bucket_size;
	struct scale scale;
	char *hdr[2];		/* HELP/TYPE/UNIT lines per format */
	size_t hdr_len[2];
	char *sample;		/* "kvm_vcpu_exits_total{" (same in both) */
	size_t sample_len;
	/* Histograms. */
	char *count_name, *sum_name;	/* "x_count{", "x_sum{" */
	size_t count_len, sum_len;
	char **le[2];		/* per bucket: `,le="..."} ` */
	uint8_t *le_len[2];
	bool has_sum;
	struct scale sum_scale;
	struct series *series;
	size_t nseries, cap;
};

/* Target kinds besides a vCPU index: the VM's own stats, and the vCPU
 * stats summed over the VM's vCPUs (debugfs: one file per stat and VM),
 * exported as kvm_vcpu_* with vcpu="sum", never as a VM's or a VM. */
#define PROM_VM (-1)
#define PROM_VCPU_SUM (-2)

struct target {
	struct kvmstats_reader *r;
	uint64_t uid;
	uint32_t vm;
	int32_t vcpu;		/* PROM_VM: the VM's own stats; PROM_VCPU_SUM */
	unsigned int src;
	uint32_t labels;	/* offset in the model's label text */
	uint32_t labels_len;
	/* Set by prom_model_prepare(). */
	const uint64_t *data;
	const uint64_t *missing;
};

/* A schema's stats mapped to families, computed once per schema. */
struct schema_map {
	const struct kvmstats_schema *s;
	bool vcpu;
	uint32_t n;		/* stats in s */
	int32_t *fam;		/* per stat: family index, or -1 */
	int32_t *sum_off;	/* per stat: the sum's word offset, or -1 */
};

struct vmm_info {
	uint64_t uid;
	pid_t pid;
	char name[128];
	const char *source;
};

struct prom_model {
	struct prom_opts o;
	struct family *fams;
	size_t nfams;
	struct target *targets;
	size_t ntargets;
	struct schema_map *maps;
	size_t nmaps;
	char *labels;
	size_t labels_len, labels_cap;
	size_t max_labels;
	size_t vmms;
	size_t summed_vcpus;	/* vCPUs behind PROM_VCPU_SUM targets */
	size_t skipped;
	size_t series_cut;	/* past a VMM's share (prom_model.c) */
	size_t series;
	size_t src_vms[PROM_NSRC];
	size_t src_errors[PROM_NSRC];
	uint64_t src_age_ns[PROM_NSRC];
	size_t src_read[PROM_NSRC];
};


/* prom_text.c: @f's HELP/TYPE(/UNIT) lines in both formats (@unit in
 * OpenMetrics' UNIT) and, for a histogram, its le fragments: built once
 * per family, copied at every rendering. 0, or -ENOMEM. */
int prom_family_text(struct family *f, const char *help, const char *unit,
		     const struct kvmstats_stat *st);

/* prom_model.c: the name of source index @src, "other" past those known. */
const char *prom_source_name(unsigned int src);

#endif
