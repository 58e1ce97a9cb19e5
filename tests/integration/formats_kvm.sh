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

# record and replay keep the name too: replay --csv of a recorded log
# and record's own text log as CSV, both RFC 4180 (CRLF, quoted fields).
"$KVMSTATS" record --pid "$VMM_PID" --interval 0.05 --count 5 \
	--output "$TMP/rec.log" --log --csv >"$TMP/log.csv"
check "record --output --log --csv: status 0" test $? = 0
"$KVMSTATS" replay --csv "$TMP/rec.log" >"$TMP/replay.csv"
out=$("$PY" - "$TMP/log.csv" "$TMP/replay.csv" "$VMM_PID" "$name" <<'EOF'
import csv, sys
log, replay, pid, name = sys.argv[1:]
bad = []
for path in (log, replay):
    lines = open(path, 'rb').read().split(b'\r\n')
    if lines[-1] != b'' or any(b'\n' in l for l in lines[:-1]):
        bad.append(path + ': not CRLF')
rows = list(csv.reader(open(log, newline='')))
if rows[0][0] != 'time' or 'exits' not in rows[0] or len(rows) != 5 or \
   any(len(r) != len(rows[0]) for r in rows) or \
   any(c and not c.replace('.', '').isdigit() for r in rows[1:] for c in r[1:]):
    bad.append('record --log --csv: %d rows, header %r' % (len(rows), rows[0][:3]))
rows = list(csv.reader(open(replay, newline='')))
body = rows[1:]
if rows[0] != ['time', 'pid', 'name', 'id', 'vcpu', 'stat', 'index', 'value'] or \
   not body or any(len(r) != 8 or r[1] != pid or r[2] != name for r in body):
    bad.append('replay --csv: header %r, names %r' % (rows[0], {r[2] for r in body}))
if {r[4] for r in body} != {'', '0', '1'}:
    bad.append('replay --csv: vcpus %r' % {r[4] for r in body})
print('; '.join(bad))
EOF
)
check "record --log --csv and replay --csv are RFC 4180 and keep '$name' exactly${out:+ ($out)}" \
	test -z "$out"
