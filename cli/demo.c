// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats demo: not written yet. */
#include "cli.h"

int cmd_demo(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "demo: not implemented yet");
	return EXIT_FAIL;
}
