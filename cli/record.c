// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats record: not written yet. */
#include "cli.h"

int cmd_record(struct cli *cli, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_err(cli, "record: not implemented yet");
	return EXIT_FAIL;
}
