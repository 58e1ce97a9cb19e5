// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats-test: needs=kvm */
/*
 * A host refreshed in steps (pending, prepare, insert) on VMMs made here:
 * forked children that create a VM on /dev/kvm, hold its stats fd or
 * not, and fork children of their own that hold the same VM (a family).
 * Every failure backs off, a family is one open at a time, claims in
 * flight stay within the caller's bound, and a VMM prepared on another
 * thread while the host's thread sweeps is inserted whole; a host-wide
 * host claims among the pids a scan on another thread found.
 */
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

#ifndef KVM_GET_STATS_FD
#define KVM_GET_STATS_FD _IO(KVMIO, 0xce)
#endif

#define MAX_KIDS 4
#define MAX_STARTED 32

/* Every process the tests started, killed at exit whatever happened. */
static pid_t started[MAX_STARTED];
static int nstarted;

struct family {
	pid_t pids[MAX_KIDS + 1];	/* its children, then itself */
	int n;
};

/* A VMM (holding its VM's stats fd when @stats) and @kids children of
 * it holding the same VM; each waits to be killed. */
static void family_start(struct family *f, bool stats, int kids)
{
	int p[2], nkids = 0;
	pid_t pid, got;

	assert_true(nstarted + kids + 1 <= MAX_STARTED);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
		int vm = kvm >= 0 ? ioctl(kvm, KVM_CREATE_VM, 0) : -1;
		pid_t me;

		close(p[0]);
		if (vm < 0 || (stats && ioctl(vm, KVM_GET_STATS_FD, 0) < 0))
			_exit(1);
		for (int i = 0; i < kids; i++) {
			if (fork())
				continue;
			me = getpid();
			if (write(p[1], &me, sizeof(me)) != sizeof(me))
				_exit(1);
			for (;;)
				pause();
		}
		me = getpid();
		if (write(p[1], &me, sizeof(me)) != sizeof(me))
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	f->n = 0;
	f->pids[kids] = pid;
	while (f->n < kids + 1 &&
	       read(p[0], &got, sizeof(got)) == sizeof(got)) {
		/* The children write in any order, the parent among them. */
		if (got != pid)
			f->pids[nkids++] = got;
		started[nstarted++] = got;
		f->n++;
	}
	close(p[0]);
	assert_int_equal(f->n, kids + 1);
	assert_int_equal(nkids, kids);
}

static void family_stop(struct family *f)
{
	for (int i = 0; i < f->n; i++) {
		kill(f->pids[i], SIGKILL);
		/* Gone: its pid may be anyone's from now on. */
		for (int j = 0; j < nstarted; j++)
			if (started[j] == f->pids[i])
				started[j] = 0;
	}
	waitpid(f->pids[f->n - 1], NULL, 0);
}

/* A test that failed half-way leaves none of its processes behind. */
static void kill_started(void)
{
	for (int i = 0; i < nstarted; i++)
		if (started[i] > 0)
			kill(started[i], SIGKILL);
}

static struct kvmstats_host *host_of(struct kvmstats_ctx *ctx,
				     const pid_t *pids, size_t n)
{
	struct kvmstats_host *h = kvmstats_host__new(ctx,
		&(struct kvmstats_host_opts){
			.sz = sizeof(struct kvmstats_host_opts),
			.pids = pids, .npids = n, .source = "fd" });

	assert_non_null(h);
	return h;
}

/* Claim what is due; the count, the pid claimed first in *first. */
static int pending(struct kvmstats_host *h, size_t max, pid_t *first)
{
	pid_t *p;
	int n = kvmstats_host__pending(h, max, &p);

	assert_true(n >= 0);
	if (n && first)
		*first = p[0];
	free(p);
	return n;
}

/* Open a claimed pid here and give it back; what insert returned. */
static int open_claimed(struct kvmstats_host *h, pid_t pid)
{
	char why[256] = "";
	struct kvmstats_vmm *v = kvmstats_host__prepare(h, pid, why, sizeof(why));

	return kvmstats_host__insert(h, pid, v, why, 1000);
}

/* Four processes holding one VM, none its stats fd: one open at a time
 * for the family, and each failure (a quick one) backs it all off,
 * a quarter second, then half a second. */
static void test_family_backs_off(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_host *h;
	struct family f;
	pid_t first = 0;

	(void)state;
	family_start(&f, false, 3);
	h = host_of(ctx, f.pids, (size_t)f.n);
	assert_int_equal(pending(h, 0, &first), 1);
	assert_int_equal(first, f.pids[0]);
	assert_int_equal(pending(h, 0, NULL), 0);	/* one in flight */
	assert_int_equal(open_claimed(h, first), 0);
	assert_int_equal(pending(h, 0, NULL), 0);	/* backed off */
	assert_non_null(strstr(kvmstats_host__errors(h), "next try in"));
	usleep(300 * 1000);
	assert_int_equal(pending(h, 0, &first), 1);
	assert_int_equal(open_claimed(h, first), 0);
	usleep(300 * 1000);
	assert_int_equal(pending(h, 0, NULL), 0);	/* 0.5 s now */
	usleep(300 * 1000);
	assert_int_equal(pending(h, 0, &first), 1);
	assert_int_equal(open_claimed(h, first), 0);
	assert_int_equal(kvmstats_host__num_vmms(h), 0);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	family_stop(&f);
}

/* Two unrelated VMMs, at most one claim in flight. */
static void test_claims_bounded(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_host *h;
	struct family a, b;
	pid_t pids[2], first = 0;

	(void)state;
	family_start(&a, false, 0);
	family_start(&b, false, 0);
	pids[0] = a.pids[0];
	pids[1] = b.pids[0];
	h = host_of(ctx, pids, 2);
	assert_int_equal(pending(h, 1, &first), 1);
	assert_int_equal(pending(h, 1, NULL), 0);
	assert_int_equal(open_claimed(h, first), 0);
	assert_int_equal(pending(h, 1, &first), 1);
	assert_int_equal(first, pids[1]);
	assert_int_equal(kvmstats_host__insert(h, first, NULL, "test", 0), 0);
	/* Not claimed (any more): refused. */
	assert_int_equal(kvmstats_host__insert(h, first, NULL, "test", 0), -ENOENT);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	family_stop(&a);
	family_stop(&b);
}

struct prep {
	const struct kvmstats_host *h;
	pid_t pid;
	struct kvmstats_vmm *v;
};

static void *prepare_thread(void *arg)
{
	struct prep *p = arg;

	p->v = kvmstats_host__prepare(p->h, p->pid, NULL, 0);
	return NULL;
}

/* A VMM holding its stats fd is opened on another thread while the
 * host's thread sweeps the one it has, then inserted and read. */
static void test_prepare_beside_sweeps(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_host *h;
	struct family a, b;
	struct prep p = { 0 };
	pid_t pids[2], first = 0;
	pthread_t t;

	(void)state;
	family_start(&a, true, 0);
	family_start(&b, true, 0);
	pids[0] = a.pids[0];
	pids[1] = b.pids[0];
	h = host_of(ctx, pids, 2);
	assert_int_equal(pending(h, 1, &first), 1);
	assert_int_equal(open_claimed(h, first), 1);
	assert_int_equal(kvmstats_host__num_vmms(h), 1);
	assert_int_equal(pending(h, 0, &first), 1);
	assert_int_equal(first, pids[1]);
	p = (struct prep){ h, first, NULL };
	assert_int_equal(pthread_create(&t, NULL, prepare_thread, &p), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(kvmstats_host__sweep(h), 0);
	pthread_join(t, NULL);
	assert_non_null(p.v);
	assert_int_equal(kvmstats_host__insert(h, first, p.v, "", 0), 1);
	assert_int_equal(kvmstats_host__num_vmms(h), 2);
	assert_true(kvmstats_vmm__uid(kvmstats_host__vmm(h, 0)) !=
		    kvmstats_vmm__uid(kvmstats_host__vmm(h, 1)));
	assert_int_equal(kvmstats_host__sweep(h), 0);
	assert_int_equal(pending(h, 0, NULL), 0);	/* both open */
	/* One schema per level, shared by both VMMs through the context. */
	assert_int_equal(kvmstats_ctx__schema_count(ctx), 1);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	family_stop(&a);
	family_stop(&b);
}

/* A host-wide host claims among the candidates it is given (a scan made
 * on another thread), and only among them. */
static void test_pending_among(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct kvmstats_host *h;
	struct family a, b;
	pid_t *p = NULL;

	(void)state;
	family_start(&a, true, 0);
	family_start(&b, true, 0);
	h = kvmstats_host__new(ctx, &(struct kvmstats_host_opts){
		.sz = sizeof(struct kvmstats_host_opts), .source = "fd" });
	assert_non_null(h);
	assert_int_equal(kvmstats_host__pending_among(h, NULL, 0, 0, &p), 0);
	assert_null(p);
	assert_int_equal(kvmstats_host__pending_among(h, NULL, 1, 0, &p), -EINVAL);
	assert_int_equal(kvmstats_host__pending_among(h, &b.pids[0], 1, 0, &p), 1);
	assert_int_equal(p[0], b.pids[0]);
	assert_int_equal(open_claimed(h, p[0]), 1);
	free(p);
	assert_int_equal(kvmstats_host__num_vmms(h), 1);
	assert_int_equal(kvmstats_vmm__pid(kvmstats_host__vmm(h, 0)), b.pids[0]);
	kvmstats_host__free(h);
	kvmstats_ctx__free(ctx);
	family_stop(&a);
	family_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_family_backs_off),
		cmocka_unit_test(test_claims_bounded),
		cmocka_unit_test(test_pending_among),
		cmocka_unit_test(test_prepare_beside_sweeps),
	};

	atexit(kill_started);
	if (access("/dev/kvm", R_OK | W_OK)) {
		printf("ok - test_discover # SKIP /dev/kvm is not available\n");
		return 0;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
