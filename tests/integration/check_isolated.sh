#!/bin/bash
# kvmstats-test: needs=none nosan
# SPDX-License-Identifier: GPL-2.0-or-later
# `make check` keeps its promise: it builds and passes as an unprivileged
# user (65534) on a host without KVM, QEMU, libvirtd or Prometheus. A
# copy of the tree is built in a mount namespace whose /dev has no kvm
# and where those programs are not executable, so that anything in
# make check that reached for them fails here.
source "$(dirname "$0")/../lib.sh"

if [ "$(id -u)" != 0 ]; then
	fail "make check isolated" "needs root to make the namespace and drop to uid 65534"
	exit 1
fi
SRC=$TMP/src
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -co --exclude-standard -z |
	xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$SRC"
chown -R 65534:65534 "$SRC"
chmod 0711 "$TMP"

# In the namespace: a /dev of the usual nodes but kvm, and the daemons
# and VMMs replaced by empty, non-executable files.
cat >"$TMP/isolate.sh" <<'EOF'
set -e
old=$1
shift
mkdir -p "$old"
mount --rbind /dev "$old"
mount -t tmpfs -o mode=0755 none /dev
for n in null zero full random urandom tty; do
	touch "/dev/$n"
	mount --bind "$old/$n" "/dev/$n"
done
mkdir /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 none /dev/shm
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
: >"$old.empty"
for p in qemu-system-x86_64 qemu-system-aarch64 prometheus promtool libvirtd virsh; do
	for d in /usr/bin /usr/sbin /usr/local/bin; do
		[ -e "$d/$p" ] && mount --bind "$old.empty" "$d/$p"
	done
done
exec "$@"
EOF
unshare -m --propagation private bash "$TMP/isolate.sh" "$TMP/olddev" \
	bash -c 'echo "kvm: $(ls /dev/kvm 2>&1)"
		 for p in qemu-system-x86_64 prometheus libvirtd; do
			 "$p" --version >/dev/null 2>&1 && echo "$p: runs" || echo "$p: none"
		 done' >"$TMP/env.log" 2>&1
sed 's/^/# /' "$TMP/env.log"
check "in the namespace, /dev/kvm is gone" grep -q '^kvm: ls: cannot access' "$TMP/env.log"
check "in the namespace, no QEMU, Prometheus or libvirtd runs" \
	test "$(grep -c ': none$' "$TMP/env.log")" = 3

timeout -k 10 1200 unshare -m --propagation private bash "$TMP/isolate.sh" "$TMP/olddev" \
	runuser -u "$(id -un 65534)" -- env -u MAKEFLAGS HOME="$SRC" \
	make -C "$SRC" -j"$(nproc)" check >"$TMP/check.log" 2>&1
rc=$?
grep -E '^(not ok|[0-9]+ passed)' "$TMP/check.log" | sed 's/^/# /'
[ $rc = 0 ] || tail -20 "$TMP/check.log"
check "make check as uid 65534 without KVM, QEMU or Prometheus: $(grep -E "^[0-9]+ passed" "$TMP/check.log" | tail -1)" \
	test $rc = 0
check "it ran the unit tests, the images and the fuzz seeds" bash -c \
	"grep -q 'test_image' '$TMP/check.log' && grep -q 'check --file rejects' '$TMP/check.log' &&
	 grep -q 'replays [0-9]* seeds' '$TMP/check.log'"
check "no test file was owned by root afterwards (nothing ran as root)" \
	bash -c "test -z \"\$(find '$SRC' -user 0 | head -1)\""
