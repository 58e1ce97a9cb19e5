// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats replay: not written yet. */
#include "cli.h"

int cmd_replay(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "replay: not implemented yet");
	return EXIT_FAIL;
}
