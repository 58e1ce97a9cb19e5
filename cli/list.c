// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats list: not written yet. */
#include "cli.h"

int cmd_list(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "list: not implemented yet");
	return EXIT_FAIL;
}
