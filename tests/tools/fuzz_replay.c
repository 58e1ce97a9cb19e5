// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A libFuzzer harness's entry point run once per file named on the command
 * line, with no fuzzing engine: `make check` replays the seeds this way
 * with the distribution's compiler and flags. A file that crashes the
 * harness was named on stderr just before, so the log says which.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* libFuzzer's -max_len in tests/integration/fuzz.sh is far below this. */
#define MAX_INPUT (16u << 20)

static int replay(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf, *exact;
	size_t n;

	if (!f) {
		perror(path);
		return -1;
	}
	buf = malloc(MAX_INPUT);
	n = buf ? fread(buf, 1, MAX_INPUT, f) : 0;
	fclose(f);
	if (!buf)
		return -1;
	/* Exactly the input's size, as libFuzzer gives it: a read past its
	 * end lands outside the allocation (found under ASan, valgrind). */
	exact = malloc(n ? n : 1);
	if (exact)
		memcpy(exact, buf, n);
	free(buf);
	if (!exact)
		return -1;
	fprintf(stderr, "replaying %s (%zu bytes)\n", path, n);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	int bad = 0;

	for (int i = 1; i < argc; i++)
		bad |= replay(argv[i]);
	return bad ? 1 : 0;
}
