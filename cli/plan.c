// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats plan: not written yet. */
#include "cli.h"

int cmd_plan(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "plan: not implemented yet");
	return EXIT_FAIL;
}
