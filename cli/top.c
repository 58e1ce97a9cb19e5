// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats top: not written yet. */
#include "cli.h"

int cmd_top(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "top: not implemented yet");
	return EXIT_FAIL;
}
