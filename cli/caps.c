// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Giving up capabilities after start-up (serve, record): every one but
 * those listed is dropped, from the bounding set too, and no_new_privs is
 * set, so that no exec can regain one.
 */
#include <cap-ng.h>
#include <stdbool.h>
#include <sys/prctl.h>

#include "cli.h"

#define MAX_KEEP 8

int caps_keep_only(const int *keep, size_t n)
{
	bool had[MAX_KEEP], setpcap;

	if (n > MAX_KEEP)
		return -1;
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	capng_get_caps_process();
	setpcap = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
	if (capng_have_capabilities(CAPNG_SELECT_CAPS) == CAPNG_NONE && !setpcap)
		return 0;	/* an unprivileged run: nothing to give up */
	for (size_t i = 0; i < n; i++)
		had[i] = capng_have_capability(CAPNG_PERMITTED, (unsigned int)keep[i]);
	capng_clear(CAPNG_SELECT_BOTH);
	for (size_t i = 0; i < n; i++) {
		if (!had[i])
			continue;
		capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED,
			     (unsigned int)keep[i]);
		capng_update(CAPNG_ADD, CAPNG_BOUNDING_SET, (unsigned int)keep[i]);
	}
	return capng_apply(setpcap ? CAPNG_SELECT_BOTH : CAPNG_SELECT_CAPS) ? -1 : 0;
}
