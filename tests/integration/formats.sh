#!/bin/bash
# kvmstats-test: needs=none
# Output formats of image files, without /dev/kvm: RFC 4180 CSV (one
# rectangular table for several files, CRLF, quoting that gives back
# every byte of an id or path), JSON's fixed default shape and its
# --verbose schema (types, units, histogram bounds); and the CLI's
# own grammar kept in main.c: version --json, help CMD, the error prefix.
. "$(dirname "$0")/../lib.sh"

PY=/usr/bin/python3
FIX=$ROOT/tests/fixtures
VM=$FIX/x86-vm.bin
VCPU=$FIX/x86-vcpu.bin

# ---- CSV ------------------------------------------------------------------

"$KVMSTATS" dump --csv --file "$VM" --file "$VCPU" >"$TMP/a.csv"
check "dump --file A --file B --csv: status 0" test $? = 0
"$KVMSTATS" dump --file "$VM" "$VCPU" --csv >"$TMP/b.csv"
check "dump --file A B --csv: status 0" test $? = 0
check "--file A B reads both files, as --file A --file B does" \
	cmp -s "$TMP/a.csv" "$TMP/b.csv"
"$KVMSTATS" --csv dump --file "$VCPU" "$VM" >"$TMP/c.csv"
check "--file A B keeps the files' order" \
	test "$(grep -c x86-vcpu.bin "$TMP/c.csv")" -gt 0 -a \
	"$(sed -n 2p "$TMP/c.csv" | grep -c x86-vcpu.bin)" = 1

# The number of values in each file, from JSON (the same command).
values=$("$KVMSTATS" dump --json --file "$VM" "$VCPU" |
	jq '[.files[].stats[] | if type == "array" then length else 1 end] | add')

# csv_check CSV ROWS: rectangular, a header, CRLF everywhere, one row per
# value, pid and vcpu empty and path set for files; prints what is wrong.
csv_check() {
	"$PY" - "$1" "$2" "$VM" "$VCPU" <<'EOF'
import csv, sys
path, rows_expected, vm, vcpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
raw = open(path, 'rb').read()
lines = raw.split(b'\r\n')
if lines[-1] != b'' or any(b'\n' in l or b'\r' in l for l in lines[:-1]):
    print('not every row ends with CRLF'); sys.exit(1)
rows = list(csv.reader(open(path, newline='')))
want = ['pid', 'name', 'path', 'id', 'vcpu', 'stat', 'index', 'value']
if rows[0] != want:
    print('header %r' % rows[0]); sys.exit(1)
if any(len(r) != len(want) for r in rows):
    print('not rectangular'); sys.exit(1)
body = rows[1:]
if len(body) != rows_expected:
    print('%d rows, %d values' % (len(body), rows_expected)); sys.exit(1)
if {r[2] for r in body} != {vm, vcpu}:
    print('paths %r' % {r[2] for r in body}); sys.exit(1)
if any(r[0] or r[1] or r[4] for r in body):
    print('a file row has a pid, name or vcpu'); sys.exit(1)
if any(not r[7].isdigit() or not r[6].isdigit() for r in body):
    print('a value or index is not a number'); sys.exit(1)
EOF
}
out=$(csv_check "$TMP/a.csv" "$values")
check "the CSV of two files is one rectangular RFC 4180 table ($values values${out:+: $out})" \
	test -z "$out"

# Every byte of an id and a path comes back: an image whose id holds a
# comma and quotes, saved under a name that holds them too.
weird='kvm-7,"x" y'
file="$TMP/a,\"b\" c.bin"
"$PY" - "$VCPU" "$file" "$weird" <<'EOF'
import struct, sys
src, dst, new_id = sys.argv[1], sys.argv[2], sys.argv[3].encode()
b = bytearray(open(src, 'rb').read())
flags, name_size, ndesc, id_off = struct.unpack_from('<IIII', b, 0)
assert len(new_id) < name_size
b[id_off:id_off + name_size] = new_id + bytes(name_size - len(new_id))
open(dst, 'wb').write(b)
EOF
"$KVMSTATS" dump --csv --file "$file" >"$TMP/w.csv" 2>"$TMP/w.err"
check "an image with a comma and quotes in its id and path is read" \
	test $? = 0
got=$("$PY" -c 'import csv,sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
ok = all(r[2] == sys.argv[2] and r[3] == sys.argv[3] for r in rows[1:])
print("same" if ok and len(rows) > 1 else "different")' "$TMP/w.csv" "$file" "$weird")
check "CSV quoting gives back the id and path exactly" test "$got" = same
check "a field with a quote is quoted, the quote doubled" \
	grep -qF ',"kvm-7,""x"" y",' "$TMP/w.csv"

# The same quoting in replay --csv: a copy of the demo's recording whose
# VMM names hold a comma, quotes, an escape and a blank at the end (its
# TARGET records rewritten, their CRCs made again).
"$PY" - "$ROOT/dist/demo/recording.kvmlog" "$TMP/q.kvmlog" <<'EOF'
import struct, sys, zlib
src = open(sys.argv[1], 'rb').read()
out, off = bytearray(src[:32]), 32
while off + 16 <= len(src):
    sync, typ, flags, n, crc = struct.unpack_from('<IHHII', src, off)
    body = src[off + 16:off + 16 + n]
    off += 16 + n
    if typ == 3:	# TARGET: 40 bytes, then name, id and source with NULs
        nl, il, sl = struct.unpack_from('<HHH', body, 32)
        name = b'web,"' + body[40:40 + nl - 1] + b'" \x1b[1m '
        hdr = bytearray(body[:40])
        struct.pack_into('<H', hdr, 32, len(name) + 1)
        body = bytes(hdr) + name + b'\0' + body[40 + nl:40 + nl + il + sl]
        body += b'\0' * (-len(body) % 8)
        n = len(body)
        crc = zlib.crc32(body, zlib.crc32(struct.pack('<HHI', typ, flags, n)))
    out += struct.pack('<IHHII', sync, typ, flags, n, crc) + body
open(sys.argv[2], 'wb').write(out)
EOF
"$KVMSTATS" replay --csv --rates --to +3 "$TMP/q.kvmlog" >"$TMP/q.csv" 2>"$TMP/q.err"
check "replay --csv of a log with such names: status 0, nothing on stderr" \
	test $? = 0 -a ! -s "$TMP/q.err"
out=$("$PY" - "$TMP/q.csv" <<'EOF'
import csv, re, sys
raw = open(sys.argv[1], 'rb').read()
lines = raw.split(b'\r\n')
if lines[-1] != b'' or any(b'\n' in l or b'\r' in l for l in lines[:-1]):
    print('not every row ends with CRLF'); sys.exit()
rows = list(csv.reader(open(sys.argv[1], newline='')))
want = ['time', 'pid', 'name', 'id', 'vcpu', 'stat', 'index', 'value', 'rate']
if rows[0] != want:
    print('header %r' % rows[0]); sys.exit()
if len(rows) < 100 or any(len(r) != len(want) for r in rows):
    print('%d rows, not rectangular' % len(rows)); sys.exit()
names = {r[2] for r in rows[1:]}
if not all(re.fullmatch(r'web,"[^"\x00-\x1f]+" \\x1b\[1m ', n) for n in names):
    print('names %r' % sorted(names)[:3]); sys.exit()
if not any(r[8] for r in rows[1:]) or not all(r[7].isdigit() or r[7] == '' for r in rows[1:]):
    print('values or rates'); sys.exit()
EOF
)
check "replay --csv is RFC 4180: a name with a comma, quotes, an escape and a blank reads back, the escape shown as \\x1b${out:+ ($out)}" \
	test -z "$out"
check "replay --csv: that name is quoted, its quotes doubled" \
	grep -qF ',"web,""' "$TMP/q.csv"

# ---- JSON -----------------------------------------------------------------

"$KVMSTATS" dump --json --file "$VCPU" >"$TMP/d.json"
check "default JSON keeps its fixed shape: raw values" \
	jq -e '.files[0].stats | (.exits | type == "number") and
		(.halt_wait_hist | type == "array") and (.guest_mode | type == "boolean")' \
	"$TMP/d.json"
"$KVMSTATS" dump --json --verbose --file "$VCPU" >"$TMP/v.json"
check "--verbose: a cumulative count has its type, unit, base and exponent" \
	jq -e '.files[0].stats.exits == {"value": .files[0].stats.exits.value,
		"type":"cumulative","unit":"none","base":10,"exponent":0}' "$TMP/v.json"
check "--verbose: halt_wait_ns is in nanoseconds (seconds, 10^-9)" \
	jq -e '.files[0].stats.halt_wait_ns | .unit == "seconds" and .base == 10 and
		.exponent == -9' "$TMP/v.json"
check "--verbose: values are the default JSON's values" \
	test "$(jq -c '.files[0].stats | map_values(.value)' "$TMP/v.json")" = \
	"$(jq -c '.files[0].stats' "$TMP/d.json")"
# A log2 histogram: bucket 0 holds 0, bucket i holds [2^(i-1), 2^i), the
# last one everything above.
check "--verbose: log2 histogram bounds, the last bucket open-ended" \
	jq -e '.files[0].stats.halt_wait_hist | .type == "log_hist" and
		(.bounds | length) == (.value | length) and .bounds[0] == [0, 1] and
		.bounds[-1][1] == null and
		([range(1; (.bounds | length) - 1) as $i |
		  .bounds[$i] == [pow(2; $i - 1), pow(2; $i)]] | all)' "$TMP/v.json"

# A linear histogram (mkbad's valid image: 4 buckets of 10).
if [ -x "$ROOT/build/mkbad" ]; then
	mkdir -p "$TMP/bad"
	"$ROOT/build/mkbad" "$TMP/bad" >/dev/null
	"$KVMSTATS" dump --json -v --file "$TMP/bad/ok-valid.bin" >"$TMP/l.json"
	check "--verbose: a linear histogram's bucket_size and bounds" \
		jq -e '.files[0].stats.lin_hist | .bucket_size == 10 and
			.bounds == [[0,10],[10,20],[20,30],[30,null]]' "$TMP/l.json"
else
	fail "--verbose: a linear histogram" "build/mkbad is missing (make test builds it)"
fi

"$KVMSTATS" dump --csv --verbose --file "$VCPU" >"$TMP/vv.csv"
out=$("$PY" - "$TMP/vv.csv" "$TMP/v.json" <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1], newline='')))
stats = json.load(open(sys.argv[2]))['files'][0]['stats']
bad = []
for r in rows:
    s = stats[r['stat']]
    i = int(r['index'])
    if r['type'] != s['type'] or r['unit'] != s['unit'] or \
       r['base'] != str(s['base']) or r['exponent'] != str(s['exponent']):
        bad.append(r['stat'])
    if 'bounds' in s:
        lo, hi = s['bounds'][i]
        if r['bucket_lo'] != str(lo) or r['bucket_hi'] != ('' if hi is None else str(hi)):
            bad.append('%s[%d]' % (r['stat'], i))
    elif r['bucket_lo'] or r['bucket_hi']:
        bad.append(r['stat'])
print(' '.join(sorted(set(bad))[:5]) if bad or not rows else '')
EOF
)
check "--csv --verbose: schema columns agree with --json --verbose${out:+ ($out)}" test -z "$out"

# ---- the CLI's grammar (main.c) -------------------------------------------

"$KVMSTATS" version --json >"$TMP/ver.json"
check "version --json is one JSON object with the version" \
	jq -e '(.version | type == "string") and (.arch | type == "string") and
		(.compiler | type == "string") and (.libvirt | type == "boolean") and
		has("commit")' "$TMP/ver.json"
check "--json version and version --json agree" \
	test "$("$KVMSTATS" --json version)" = "$(cat "$TMP/ver.json")"
check "version prints the version on one line" \
	grep -qx "kvmstats $(jq -r .version "$TMP/ver.json") (.*)" \
	<("$KVMSTATS" version)
differ=""
for cmd in dump list top record replay serve plan check demo version; do
	a=$("$KVMSTATS" help "$cmd" 2>&1)
	ra=$?
	b=$("$KVMSTATS" "$cmd" --help 2>&1)
	rb=$?
	[ "$a" = "$b" ] && [ $ra = 0 ] && [ $rb = 0 ] && [ -n "$a" ] ||
		differ="$differ $cmd"
done
check "help CMD prints what CMD --help prints${differ:+ (not for:$differ)}" \
	test -z "$differ"
"$KVMSTATS" help nosuch >/dev/null 2>"$TMP/err"
check "help of an unknown command: status 2" test $? = 2
"$KVMSTATS" dump --bogus >/dev/null 2>"$TMP/err"
check "a bad option: status 2" test $? = 2
check "a bad option: 'kvmstats: dump: ...' first" \
	grep -qx "kvmstats: dump: unrecognized option '--bogus'" <(head -1 "$TMP/err")
# $KVMSTATS is a path: the messages name the program, not the path.
"$KVMSTATS" --bogus dump >/dev/null 2>"$TMP/err"
check "a bad global option: 'kvmstats: ...', not the path it was run by" \
	grep -qx "kvmstats: unrecognized option '--bogus'" <(head -1 "$TMP/err")
"$KVMSTATS" dump --file "$TMP/nosuch.bin" >/dev/null 2>"$TMP/err"
check "a runtime error: status 1, 'kvmstats: dump: PATH: ...'" \
	test $? = 1 -a "$(grep -c "^kvmstats: dump: $TMP/nosuch.bin: " "$TMP/err")" = 1
"$KVMSTATS" version --csv >/dev/null 2>"$TMP/err"
check "version --csv is a usage error naming the command" \
	test $? = 2 -a "$(grep -c '^kvmstats: version: ' "$TMP/err")" = 1
