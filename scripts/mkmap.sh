#!/bin/sh
# Generate the linker version script from the KVMSTATS_API declarations of
# the public headers: what is declared there is exported, nothing else.
# SPDX-License-Identifier: GPL-2.0-or-later
set -eu
echo "LIBKVMSTATS_0.1 {"
echo "	global:"
cat "$@" | tr '\n' ' ' | sed 's/;/;\n/g' | grep 'KVMSTATS_API' |
	grep -o 'kvmstats_[a-z0-9_]*[ ]*(' | sed 's/[ (]//g' | sort -u |
	sed 's/^/		/; s/$/;/'
echo "	local:"
echo "		*;"
echo "};"
