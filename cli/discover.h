/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Opening new VMMs on worker threads, so that the thread that samples or
 * serves the host never waits for one (see discover.c).
 */
#ifndef KVMSTATS_CLI_DISCOVER_H
#define KVMSTATS_CLI_DISCOVER_H

#include <stdbool.h>
#include <stdint.h>

#include <kvmstats.h>

struct discover;

/* Workers (@threads of them, each signal blocked) that open the VMMs of
 * @h; NULL with errno set. @h must outlive the object. */
struct discover *discover_new(struct kvmstats_host *h, unsigned int threads);
/* Stops the workers (an open in progress ends first: at most the host's
 * timeout per exchange) and closes the VMMs not inserted yet. */
void discover_free(struct discover *d);

/*
 * The calls below are the host's thread's, with the host held as for any
 * other use of it (serve: the scrape lock). Each is quick.
 */
/* Drop exited VMMs, add hot-added vCPUs, and queue the VMMs the host says
 * are due (within the bound on opens in flight). Returns how many VMMs
 * were dropped, or a negative errno. */
int discover_refresh(struct discover *d);
/* The same, but the scan of /proc runs on the scanner's thread: the VMMs
 * it finds are claimed and queued by a discover_collect() after it. */
int discover_scan(struct discover *d);
/* Insert the VMMs opened since the last call, and note the failures;
 * claim and queue what the last discover_scan() found, once it is done.
 * Returns how many were added. */
int discover_collect(struct discover *d);
/* Anything queued, being opened or opened and not collected, or a scan
 * asked for and not claimed among yet? */
bool discover_busy(struct discover *d);

/* Wait (without the host) until nothing is queued or being opened, at
 * most @timeout_ns; true when settled. */
bool discover_wait(struct discover *d, uint64_t timeout_ns);

#endif
