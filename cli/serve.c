// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats serve: not written yet. */
#include "cli.h"

int cmd_serve(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "serve: not implemented yet");
	return EXIT_FAIL;
}
