#!/bin/bash
# kvmstats-test: needs=kvm
# CSV of live VMs: a VMM whose name holds a comma and quotes reads back
# exactly, with its pid and vCPUs; the images it saves give the same
# values through --file.
. "$(dirname "$0")/../lib.sh"
require_kvm

PY=/usr/bin/python3
# The VMM's name is its comm when it has no -name: the name of the link
# it was started by.
name='we,b "1"'
ln -s "$TINYVMM" "$TMP/$name"
TINYVMM="$TMP/$name" start_vmm --vms 1 --vcpus 2 --exits 10 --hold-stats ||
	{ fail "a tinyvmm named $name"; exit 0; }
check "the VMM is named '$name'" test "$(cat /proc/$VMM_PID/comm)" = "$name"

"$KVMSTATS" dump --pid "$VMM_PID" --csv >"$TMP/live.csv"
check "dump --csv of a live VM: status 0" test $? = 0
out=$("$PY" - "$TMP/live.csv" "$VMM_PID" "$name" <<'EOF'
import csv, sys
path, pid, name = sys.argv[1], sys.argv[2], sys.argv[3]
rows = list(csv.reader(open(path, newline='')))
bad = []
if rows[0][:8] != ['pid', 'name', 'path', 'id', 'vcpu', 'stat', 'index', 'value']:
    bad.append('header')
body = rows[1:]
if any(len(r) != len(rows[0]) for r in rows):
    bad.append('not rectangular')
if not body or any(r[0] != pid or r[1] != name or r[2] != '' for r in body):
    bad.append('pid/name/path')
if {r[4] for r in body} != {'', '0', '1'}:
    bad.append('vcpus %r' % sorted({r[4] for r in body}))
print(', '.join(bad))
EOF
)
check "the name with a comma and quotes reads back exactly, with pid and vCPUs${out:+ ($out)}" \
	test -z "$out"

# The halted VM's values do not move: the saved images give the same
# values as the live reading (path column aside).
"$KVMSTATS" dump --pid "$VMM_PID" --save "$TMP/img" >/dev/null
"$KVMSTATS" dump --pid "$VMM_PID" --csv >"$TMP/live2.csv"
"$KVMSTATS" dump --csv --file "$TMP/img/$VMM_PID-vm0.bin" \
	"$TMP/img/$VMM_PID-vm0-vcpu0.bin" "$TMP/img/$VMM_PID-vm0-vcpu1.bin" >"$TMP/files.csv"
out=$("$PY" - "$TMP/live2.csv" "$TMP/files.csv" <<'EOF'
import csv, sys
live = list(csv.reader(open(sys.argv[1], newline='')))[1:]
files = list(csv.reader(open(sys.argv[2], newline='')))[1:]
key = lambda r: (r[3], r[5], r[6])
a = {key(r): r[7] for r in live}
b = {key(r): r[7] for r in files}
diff = [k for k in a if k not in b or a[k] != b[k]]
print('%d of %d differ: %s' % (len(diff), len(a), diff[:3]) if diff or not a else '')
EOF
)
check "saved images read back with --file A B C give the live values${out:+ ($out)}" \
	test -z "$out"
