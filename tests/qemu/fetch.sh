#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/qemu/fetch.sh VERSION: print the path of an executable that runs
# QEMU VERSION's qemu-system-x86_64 with the arguments it is given, or fail
# (exit 1) with the reason on stderr.
#
#   VERSION  7.2 (or "system"): the QEMU of this Debian 12 host, as it is;
#            10.0: the host's own where it is 10.0 (Debian 13), else, on
#            Debian 12, its bookworm-backports build, fetched once.
#
# The backports build is never installed: `apt-get download` fetches its
# .debs through a private apt configuration (the mirror is the one the
# system's own apt sources name for bookworm, read at run time; the suite
# bookworm-backports; a private state and cache directory), and dpkg -x
# unpacks them into ${KVMSTATS_TEST_CACHE:-/var/cache/kvmstats-test}/qemu-10.0,
# outside the tree. The system's apt configuration, its package lists and
# its dpkg database are never changed. The wrapper (made from
# tests/qemu/wrapper.in) runs the unpacked binary with its own firmware
# (-L) and modules (QEMU_MODULE_DIR), and with the few libraries bookworm
# has too old, taken from backports as well (LD_LIBRARY_PATH).
#
# Concurrent fetches of one version wait for each other (flock).
set -u
set -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${KVMSTATS_TEST_CACHE:-/var/cache/kvmstats-test}
SUITE=bookworm-backports
# The backports packages of QEMU and what it needs beyond bookworm.
# Every module package too: QEMU looks for a module it lacks in the
# system QEMU's directory next, and aborts on one of another build
# ("Only modules from the same build can be loaded"), which libvirt's
# probe (qom-list-types loads them all) runs into.
PKGS=(qemu-system-x86 qemu-system-common qemu-system-data qemu-system-gui
	qemu-system-modules-opengl qemu-system-modules-spice qemu-block-extra)
# Firmware: its own when backports has a build of it, else the system's.
FIRMWARE=(seabios ipxe-qemu)

die() {
	echo "tests/qemu/fetch.sh: $*" >&2
	exit 1
}

[ $# = 1 ] || die "usage: tests/qemu/fetch.sh VERSION (7.2 or 10.0)"
VERSION=$1

case $VERSION in
7.2 | system)
	q=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
	"$q" --version | grep -q "version 7\.2\." ||
		[ "$VERSION" = system ] ||
		die "this host's QEMU is not 7.2: $("$q" --version | head -1)"
	echo "$q"
	exit 0
	;;
10.0)
	# A host whose own QEMU is 10.0 (Debian 13) fetches nothing.
	q=$(command -v qemu-system-x86_64) &&
		"$q" --version 2>/dev/null | grep -q "version 10\.0\." && { echo "$q"; exit 0; }
	# Only Debian 12 has a backports build of 10.0 to fetch.
	suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	[ "$suite" = bookworm ] ||
		die "QEMU 10.0 is fetched from bookworm-backports for Debian 12 hosts; this host is '${suite:-unknown}' and its QEMU is $("${q:-false}" --version 2>/dev/null | head -1 || echo "not installed")"
	# The backports build runs on the libraries bookworm's own QEMU
	# brought (capstone, fdt, ...): only those backports has newer are
	# fetched.
	[ -n "${q:-}" ] ||
		die "QEMU 10.0 from bookworm-backports runs on the libraries of bookworm's QEMU, which is not installed (make test-deps, or apt-get install qemu-system-x86)"
	;;
*) die "unknown QEMU version '$VERSION' (7.2 or 10.0)" ;;
esac

DEST=$CACHE/qemu-$VERSION
WRAPPER=$DEST/qemu-system-x86_64

# The mirror serving bookworm in the system's apt sources (deb822 or
# one-line format), printed as "URI KEYRING" (KEYRING may be empty).
system_mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			function flush() {
				if (deb && uri != "" && suites ~ /(^| )bookworm( |$)/ && !done) {
					print uri, key; done = 1
				}
				deb = 0; uri = ""; suites = ""; key = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			tolower($1) == "types:" { deb = ($0 ~ /[ \t]deb([ \t]|$)/) }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
			tolower($1) == "signed-by:" { key = $2 }
			END { flush() }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" {
			i = 2; key = ""
			if ($2 ~ /^\[/) {
				for (; i <= NF; i++) {
					if ($i ~ /signed-by=/) { key = $i; sub(/.*signed-by=/, "", key); sub(/\]$/, "", key) }
					if ($i ~ /\]$/) { i++; break }
				}
			}
			if ($(i + 1) == "bookworm") { print $i, key; exit }
		}' "$f"
	done
}

# get WORK PKG...: download PKGs and unpack them into WORK/root.
get() {
	local work=$1 deb
	shift
	rm -f "$work"/debs/*.deb
	if ! (cd "$work/debs" && apt-get -q download "$@") >"$work/download.log" 2>&1; then
		tail -3 "$work/download.log" >&2
		rm -rf "$work"
		die "apt-get download $* failed"
	fi
	for deb in "$work"/debs/*.deb; do
		dpkg -x "$deb" "$work/root" || { rm -rf "$work"; die "dpkg -x $deb failed"; }
	done
}

# Fetch and unpack into $DEST (called with the lock held).
fetch() {
	local mirror keyring apt work
	read -r mirror keyring < <(system_mirror | head -1)
	[ -n "${mirror:-}" ] || die "no apt source for Debian bookworm in /etc/apt: cannot derive the $SUITE mirror"
	[ -n "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -r "$keyring" ] || die "the Debian archive keyring $keyring is missing (apt-get install debian-archive-keyring)"
	command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "apt-get and dpkg are needed"

	work=$(mktemp -d "$CACHE/.fetch-$VERSION.XXXXXX") || die "cannot write to $CACHE"
	apt=$work/apt
	mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/state/lists/partial" \
		"$apt/cache/archives/partial" "$work/debs" "$work/root"
	echo "deb [signed-by=$keyring] $mirror $SUITE main" >"$apt/etc/sources.list"
	# Private state: nothing of the system's apt is read or written but
	# its dpkg status (read only) and its apt.conf.d (proxies, ...).
	cat >"$apt/apt.conf" <<-CONF
		Dir::Etc::sourcelist "$apt/etc/sources.list";
		Dir::Etc::sourceparts "$apt/etc/sources.list.d";
		Dir::Etc::preferencesparts "$apt/etc/preferences.d";
		Dir::State "$apt/state";
		Dir::State::status "/var/lib/dpkg/status";
		Dir::Cache "$apt/cache";
		Dir::Cache::pkgcache "";
		Dir::Cache::srcpkgcache "";
		Debug::NoLocking "true";
		APT::Sandbox::User "root";
	CONF
	export APT_CONFIG=$apt/apt.conf
	if ! apt-get -q update >"$work/update.log" 2>&1; then
		tail -3 "$work/update.log" >&2
		rm -rf "$work"
		die "apt-get update of $SUITE failed"
	fi
	# The newest 10.0 build in backports.
	local ver
	ver=$(apt-cache madison qemu-system-x86 | awk -v s="$SUITE" '$0 ~ s && $3 ~ /^1:10\.0/ { print $3; exit }')
	if [ -z "$ver" ]; then
		rm -rf "$work"
		die "$SUITE has no qemu-system-x86 10.0"
	fi
	local want=() p libs
	for p in "${PKGS[@]}"; do
		apt-cache show "$p=$ver" >/dev/null 2>&1 && want+=("$p=$ver")
	done
	for p in "${FIRMWARE[@]}"; do
		apt-cache madison "$p" 2>/dev/null | grep -q "$SUITE" && want+=("$p/$SUITE")
	done
	get "$work" "${want[@]}"
	[ -x "$work/root/usr/bin/qemu-system-x86_64" ] || { rm -rf "$work"; die "the packages hold no qemu-system-x86_64"; }
	# Libraries bookworm lacks or has too old (ldd says "not found"):
	# those of QEMU's dependencies that backports has.
	if ldd "$work/root/usr/bin/qemu-system-x86_64" 2>&1 | grep -q "not found"; then
		want=()
		libs=$(apt-cache depends "qemu-system-x86=$ver" "qemu-system-common=$ver" 2>/dev/null |
			awk '/Depends:/ { print $2 }' | sort -u)
		for p in $libs; do
			case $p in lib*) ;; *) continue ;; esac
			apt-cache madison "$p" 2>/dev/null | grep -q "$SUITE" && want+=("$p/$SUITE")
		done
		[ ${#want[@]} = 0 ] || get "$work" "${want[@]}"
	fi
	sed -e "s|@ROOT@|$DEST/root|g" -e "s|@VERSION@|$ver|g" "$HERE/wrapper.in" >"$work/qemu-system-x86_64"
	chmod 755 "$work/qemu-system-x86_64"
	echo "$ver" >"$work/version"
	rm -rf "$work/apt" "$work/debs" "$work"/*.log
	rm -rf "$DEST"
	mv "$work" "$DEST" || die "cannot move the unpacked QEMU to $DEST"
}

# Does the unpacked QEMU run here? (its libraries resolve, it starts)
works() {
	[ -x "$WRAPPER" ] && "$WRAPPER" --version 2>/dev/null | grep -q "version $VERSION\."
}

mkdir -p "$CACHE" || die "cannot create $CACHE (set KVMSTATS_TEST_CACHE)"
exec 9>"$CACHE/.qemu-$VERSION.lock" || die "cannot lock $CACHE/.qemu-$VERSION.lock"
flock 9
if ! works; then
	fetch
	works || die "the unpacked QEMU $VERSION does not run: $("$WRAPPER" --version 2>&1 | head -2 | tr '\n' ' ')"
fi
echo "$WRAPPER"
