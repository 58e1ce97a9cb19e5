// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * bench/read: the cost of the library's reading of a stats fd against the
 * bare pread loop over the same fds, measured in the same run.
 *
 *   build/bench/read [VMS [VCPUS [ROUNDS]]]	(default 250 x 3 = 1000 fds)
 *
 * Rounds alternate (bare, library, sweep, ...) so that noise from other
 * tenants hits all of them alike; the median of each is reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvmstats.h"

#include "bench.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* Create VMs and vCPUs and their stats fds; returns the count. */
static int make_fds(int nvms, int nvcpus, int *fds)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC), n = 0;

	if (kvm < 0) {
		fprintf(stderr, "bench/read: /dev/kvm: %s (skipped)\n", strerror(errno));
		return -1;
	}
	for (int i = 0; i < nvms; i++) {
		int vm = ioctl(kvm, KVM_CREATE_VM, 0);

		if (vm < 0)
			goto err;
		fds[n++] = ioctl(vm, KVM_GET_STATS_FD, NULL);
		for (int j = 0; j < nvcpus; j++) {
			int vcpu = ioctl(vm, KVM_CREATE_VCPU, j);

			if (vcpu < 0)
				goto err;
			fds[n++] = ioctl(vcpu, KVM_GET_STATS_FD, NULL);
		}
	}
	for (int i = 0; i < n; i++)
		if (fds[i] < 0)
			goto err;
	return n;
err:
	fprintf(stderr, "bench/read: creating VMs: %s\n", strerror(errno));
	return -1;
}

int main(int argc, char **argv)
{
	int nvms = argc > 1 ? atoi(argv[1]) : 250;
	int nvcpus = argc > 2 ? atoi(argv[2]) : 3;
	int rounds = argc > 3 ? atoi(argv[3]) : 41;
	int max = nvms * (nvcpus + 1), n;
	int *fds = calloc((size_t)max, sizeof(*fds));
	struct kvmstats_reader **r = calloc((size_t)max, sizeof(*r));
	struct kvmstats_sample **smp = calloc((size_t)max, sizeof(*smp));
	uint64_t *t_bare = calloc((size_t)rounds, 8), *t_lib = calloc((size_t)rounds, 8);
	uint64_t *t_sweep = calloc((size_t)rounds, 8), *t_bare2 = calloc((size_t)rounds, 8);
	uint64_t **dbl = calloc((size_t)max * 2, sizeof(*dbl));
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct rlimit rl;
	static uint64_t buf[8192];
	uint64_t mb, ml, ms;

	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	n = make_fds(nvms, nvcpus, fds);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		r[i] = kvmstats_reader__open_fd(ctx, fds[i],
			&(struct kvmstats_reader_opts){
				.sz = sizeof(struct kvmstats_reader_opts),
				.flags = KVMSTATS_READER_NO_TIME });
		if (!r[i]) {
			fprintf(stderr, "bench/read: open: %s\n", strerror(errno));
			return 1;
		}
		smp[i] = kvmstats_sample__new(kvmstats_reader__schema(r[i]));
		dbl[2 * i] = calloc(1, 8192);
		dbl[2 * i + 1] = calloc(1, 8192);
	}
	for (int k = 0; k < rounds; k++) {
		uint64_t t0 = now_ns();

		for (int i = 0; i < n; i++) {
			struct kvmstats_schema *s = kvmstats_reader__schema(r[i]);

			/* The bare loop: what a reader that knows the layout does. */
			if (pread(fds[i], buf, kvmstats_schema__data_size(s),
				  kvmstats_schema__data_offset(s)) <= 0)
				return 1;
		}
		uint64_t t1 = now_ns();

		for (int i = 0; i < n; i++)
			if (kvmstats_reader__read(r[i], smp[i]))
				return 1;
		uint64_t t2 = now_ns();
		uint64_t stamp = now_ns();

		for (int i = 0; i < n; i++)
			if (kvmstats_reader__sweep(r[i], stamp))
				return 1;
		uint64_t t3 = now_ns();

		/* Bare again, into two buffers per fd used in turn: the same
		 * memory a sweep keeps (previous and current reading). */
		for (int i = 0; i < n; i++) {
			struct kvmstats_schema *s = kvmstats_reader__schema(r[i]);

			if (pread(fds[i], dbl[2 * i + (k & 1)], kvmstats_schema__data_size(s),
				  kvmstats_schema__data_offset(s)) <= 0)
				return 1;
		}
		t_bare2[k] = now_ns() - t3;
		t_bare[k] = t1 - t0;
		t_lib[k] = t2 - t1;
		t_sweep[k] = t3 - t2;
	}
	mb = median(t_bare, rounds);
	ml = median(t_lib, rounds);
	ms = median(t_sweep, rounds);
	uint64_t mb2 = median(t_bare2, rounds);
	printf("bench/read: %d stats fds (%d VMs x %d vCPUs + VM fds), %d rounds, "
	       "%u schema(s)\n", n, nvms, nvcpus, rounds,
	       (unsigned)kvmstats_ctx__schema_count(ctx));
	printf("  bare pread loop         %8.0f ns/fd   %7.2f ms/sweep\n",
	       (double)mb / n, mb / 1e6);
	printf("  kvmstats_reader__read   %8.0f ns/fd   %7.2f ms/sweep   %.3fx bare (%+.1f%%)\n",
	       (double)ml / n, ml / 1e6, (double)ml / (double)mb,
	       ((double)ml / (double)mb - 1) * 100);
	printf("  bare, 2 buffers per fd  %8.0f ns/fd   %7.2f ms/sweep\n",
	       (double)mb2 / n, mb2 / 1e6);
	printf("  kvmstats_reader__sweep  %8.0f ns/fd   %7.2f ms/sweep   %.3fx bare 2-buffer (%+.1f%%)\n",
	       (double)ms / n, ms / 1e6, (double)ms / (double)mb2,
	       ((double)ms / (double)mb2 - 1) * 100);
	for (int i = 0; i < n; i++) {
		kvmstats_sample__free(smp[i]);
		kvmstats_reader__close(r[i]);
	}
	kvmstats_ctx__free(ctx);
	return 0;
}
