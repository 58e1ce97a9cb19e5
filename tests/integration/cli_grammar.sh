#!/bin/bash
# kvmstats-test: needs=none
# One CLI grammar in every command, without /dev/kvm: the options --help
# lists (as text and as JSON), the man page documents and the bash
# completion offers are the same set; getopt takes each of them; --json
# and the other common options stand before or after the command; 'help
# CMD' is 'CMD --help'; usage errors and conflicting options are status 2
# with one line "kvmstats: CMD: ...".
# SPDX-License-Identifier: GPL-2.0-or-later
. "$(dirname "$0")/../lib.sh"

PY=/usr/bin/python3
COMP=$ROOT/dist/kvmstats.bash-completion
VCPU=$ROOT/tests/fixtures/x86-vcpu.bin
VM=$ROOT/tests/fixtures/x86-vm.bin
LOG=$ROOT/dist/demo/recording.kvmlog
CMDS="top list dump record replay serve plan follow check demo version help"

# opts_help CMD: every option --help's text lists, one a line ("--pid",
# "-p"): the words before the description on each option line.
opts_help() {
	"$KVMSTATS" $1 --help | "$PY" -c '
import re, sys
on = False
for line in sys.stdin:
    if re.match(r"^Options", line):
        on = True
        continue
    if on and not line.strip():
        break
    if on and re.match(r"^ +-", line):
        words = re.split(r"\s{2,}", line.strip())[0]
        for w in re.findall(r"(?<![\w-])(--?[\w.-]+)", words):
            print(w.rstrip(","))
' | sort -u
}

# opts_json CMD: the same from --help --json.
opts_json() {
	"$KVMSTATS" $1 --help --json | jq -r '.options[].names[]' | sort -u
}

# opts_man PAGE [SECTION]: the options of the tag lines (.TP) of every
# section whose title holds "OPTIONS" (or SECTION alone).
opts_man() {
	"$PY" - "$ROOT/docs/$1" "${2:-OPTIONS}" <<'EOF' | sort -u
import re, sys
page, want = sys.argv[1], sys.argv[2]
on = tag = False
for line in open(page):
    line = line.rstrip('\n')
    if line.startswith('.SH'):
        title = line[3:].strip().strip('"')
        on = want in title if want == 'OPTIONS' else title == want
        continue
    if not on:
        continue
    if line.startswith('.TP'):
        tag = True
        continue
    if tag:
        tag = False
        text = re.sub(r'\\f(\(..|\[[^]]*\]|.)', ' ', line)
        text = text.replace('\\-', '-').replace('"', ' ')
        for w in re.findall(r'(?<![\w-])(--[a-z0-9][\w.-]*|-[A-Za-z0-9](?![\w-]))',
                            text):
            print(w)
EOF
}

# opts_comp CMD: what the completion offers after CMD (before a command
# when CMD is empty).
opts_comp() {
	bash -c 'source "$1"
		if [ -z "$2" ]; then echo $_kvmstats_global_opts
		else _kvmstats_cmd_opts "$2"; fi' _ "$COMP" "$1" | tr -s ' \t' '\n' |
		grep . | sort -u
}

# ---- the three lists agree -------------------------------------------------

differ=""
for cmd in "" $CMDS; do
	name=${cmd:-kvmstats}
	h=$(opts_help "$cmd")
	j=$(opts_json "$cmd")
	[ -n "$h" ] || differ="$differ $name:no-options"
	[ "$h" = "$j" ] || differ="$differ $name:text-vs-json"
	long=$(grep -- '^--' <<<"$h")
	c=$(opts_comp "$cmd")
	[ "$long" = "$c" ] ||
		differ="$differ $name:completion($(comm -3 <(echo "$long") <(echo "$c") | tr -d '\t' | tr '\n' ' '))"
	case $cmd in
	"") m=$(opts_man kvmstats.1 "GLOBAL OPTIONS") ;;
	version | help) m=$(opts_man kvmstats.1 "GLOBAL OPTIONS") ;;
	*) m=$(opts_man "kvmstats-$cmd.1") ;;
	esac
	case $cmd in
	version | help)
		# Documented with the global options they share.
		extra=$(comm -23 <(echo "$h") <(echo "$m"))
		[ -z "$extra" ] || differ="$differ $name:man($(echo $extra))" ;;
	*)
		[ "$h" = "$m" ] ||
			differ="$differ $name:man($(comm -3 <(echo "$h") <(echo "$m") | tr -d '\t' | tr '\n' ' '))" ;;
	esac
done
check "--help (text and JSON), the man page and the completion list the same options${differ:+ (differ:$differ)}" \
	test -z "$differ"

# Every option with an argument says its default; every one what it does.
bad=""
for cmd in "" $CMDS; do
	b=$("$KVMSTATS" $cmd --help --json | jq -r '.options[] |
		select((.argument != null and .default == null) or
		       (.help | length) < 8) | .names[-1]')
	[ -z "$b" ] || bad="$bad ${cmd:-kvmstats}:$(echo $b)"
done
check "every option has a line of help, and a default when it takes an argument${bad:+ (not:$bad)}" \
	test -z "$bad"

# ---- getopt takes every option --help lists -------------------------------

# One process an option (a run with all of them stops at the first value
# it refuses); no other process in the loop: it is hundreds of runs.
bad=""
getopt_err='unrecognized|ambiguous|needs an argument|takes no argument'
for cmd in $CMDS; do
	while read -r o arg; do
		if [ "$arg" = null ]; then set -- "$o"; else set -- "$o" 1; fi
		err=$("$KVMSTATS" "$cmd" "$@" --help 2>&1 >/dev/null)
		[[ $err =~ $getopt_err ]] && bad="$bad $cmd:$o"
	done < <("$KVMSTATS" "$cmd" --help --json |
		jq -r '.options[] | .argument as $a | .names[] | "\(.) \($a)"')
done
check "getopt takes every option of every command's --help${bad:+ (refused:$bad)}" \
	test -z "$bad"

# ---- help CMD is CMD --help -------------------------------------------------

differ=""
for cmd in $CMDS; do
	[ "$("$KVMSTATS" help "$cmd")" = "$("$KVMSTATS" "$cmd" --help)" ] &&
		[ "$("$KVMSTATS" help "$cmd" --json)" = "$("$KVMSTATS" "$cmd" --help --json)" ] &&
		[ "$("$KVMSTATS" --help "$cmd")" = "$("$KVMSTATS" "$cmd" -h)" ] ||
		differ="$differ $cmd"
done
check "help CMD, --help CMD and CMD --help print the same${differ:+ (not for:$differ)}" \
	test -z "$differ"
check "help alone is the global --help" \
	test "$("$KVMSTATS" help)" = "$("$KVMSTATS" --help)"

# ---- the common options before or after the command ------------------------

differ=""
for cmd in $CMDS; do
	a=$("$KVMSTATS" --json "$cmd" --help)
	b=$("$KVMSTATS" "$cmd" --help --json)
	c=$("$KVMSTATS" "$cmd" -j -h)
	jq -e . >/dev/null <<<"$a" && [ "$a" = "$b" ] && [ "$a" = "$c" ] ||
		differ="$differ $cmd"
done
check "--json before or after every command: the same JSON help${differ:+ (not for:$differ)}" \
	test -z "$differ"

# same_output NAME CMD...: CMD with --json first and last prints the same,
# valid JSON, status 0 both.
same_json() {
	local name=$1 a b ra rb
	shift
	a=$("$KVMSTATS" --json "$@" 2>/dev/null)
	ra=$?
	b=$("$KVMSTATS" "$@" --json 2>/dev/null)
	rb=$?
	check "$name: --json before and after the command print the same JSON" \
		test $ra = 0 -a $rb = 0 -a "$a" = "$b" -a -n "$(jq -c . <<<"$a" 2>/dev/null)"
}
same_json "version" version
same_json "dump --file A B" dump --file "$VM" "$VCPU"
same_json "check --file A B" check --file "$VM" "$VCPU"
same_json "replay" replay --from +0 --to +2 "$LOG"
"$KVMSTATS" --pretty dump --file "$VCPU" >"$TMP/p1"
"$KVMSTATS" dump --file "$VCPU" --pretty >"$TMP/p2"
check "--pretty before and after the command: the same indented JSON" \
	test "$(wc -l <"$TMP/p1")" -gt 10 -a "$(cat "$TMP/p1")" = "$(cat "$TMP/p2")"
check "--csv before and after the command: the same CSV" \
	test "$("$KVMSTATS" --csv dump --file "$VCPU")" = \
	"$("$KVMSTATS" dump --file "$VCPU" --csv)"
check "list --csv is a CSV with its header" \
	grep -qx $'pid,name,vms,vcpus,memory_bytes,source,vm_source,vcpu_source,sources\r' \
	<("$KVMSTATS" list --csv | head -1)

# --file takes several images in every command that reads them.
check "check --file A B checks both (as --file A --file B)" \
	test "$("$KVMSTATS" check --json --file "$VM" "$VCPU" | jq -c '[.targets[].target]')" = \
	"$("$KVMSTATS" check --json --file "$VM" --file "$VCPU" | jq -c '[.targets[].target]')" -a \
	"$("$KVMSTATS" check --json --file "$VM" "$VCPU" | jq '.targets | length')" = 2

# ---- usage errors: status 2, one line "kvmstats: CMD: ..." -----------------

# usage NAME PATTERN CMD ARGS...: status 2, nothing on stdout, one line on
# stderr: "kvmstats: CMD: " then PATTERN (an ERE), the command not named
# twice.
usage() {
	local name=$1 pat=$2 cmd=$3 out err rc
	shift 3
	out=$("$KVMSTATS" "$@" 2>"$TMP/err")
	rc=$?
	err=$(cat "$TMP/err")
	if [ $rc = 2 ] && [ -z "$out" ] && [ "$(wc -l <"$TMP/err")" = 1 ] &&
		grep -Eq "^kvmstats: $cmd: $pat" <<<"$err" &&
		! grep -q "^kvmstats: $cmd: $cmd:" <<<"$err"; then
		pass "$name"
	else
		fail "$name" "status $rc, stderr: $(head -3 "$TMP/err" | tr '\n' '|')"
	fi
}

for cmd in $CMDS; do
	usage "$cmd --bogus: an unrecognized option" "unrecognized option '--bogus'" \
		"$cmd" "$cmd" --bogus
	usage "$cmd -Z: an unrecognized short option" "unrecognized option '-Z'" \
		"$cmd" "$cmd" -Z
done
"$KVMSTATS" --bogus dump >/dev/null 2>"$TMP/err"
check "a bad option before the command: status 2, 'kvmstats: unrecognized option'" \
	test $? = 2 -a "$(cat "$TMP/err")" = "kvmstats: unrecognized option '--bogus'"
# Without a command, options are top's, as kvm_stat's are its screen's.
check "kvmstats -p 1 -s 2 --help is top's help" \
	test "$("$KVMSTATS" -p 1 -s 2 --help)" = "$("$KVMSTATS" top --help)"
usage "without a command, an unknown option is top's" "unrecognized option '--bogus'" \
	top --bogus
check "kvmstats --help alone is the global help" \
	grep -q '^Commands' <("$KVMSTATS" --help)
usage "an option without its argument" "option '--interval' needs an argument" \
	top top --interval
usage "an argument to an option that takes none" "option '--once' takes no argument" \
	top top --once=1
usage "an ambiguous abbreviation" "option '--ro' is ambiguous" \
	record record --ro 1
usage "a bad value" "--count: '0' is not a number" record record --log --count 0
usage "an unexpected operand" "unexpected argument 'extra'" dump dump extra
usage "a missing operand" "which FILE\\?" replay replay
"$KVMSTATS" nosuch >/dev/null 2>"$TMP/err"
check "an unknown command: status 2, one line" \
	test $? = 2 -a "$(grep -c "^kvmstats: what is 'nosuch'" "$TMP/err")" = 1

# ---- conflicting options -----------------------------------------------------

usage "--json --csv" "--csv and --json" dump dump --json --csv --file "$VCPU"
usage "--json before, --csv after" "--csv and --json" dump --json dump --csv --file "$VCPU"
usage "--pretty --csv" "--csv and --pretty" replay replay --csv --pretty "$LOG"
usage "--verbose --quiet" "--verbose and --quiet" dump -q dump -v --file "$VCPU"
usage "version --csv" "--csv: version prints" version version --csv
usage "serve --json (before the command)" "--json: serve prints" serve --json serve
usage "serve --json (after it)" "--json: serve prints" serve serve --json
usage "plan --csv" "--csv: plan prints" plan plan --csv
usage "demo --json" "--json: demo prints" demo demo --json
usage "top --json without --once" "--json goes with --once" top top --json
usage "top --loop without --replay" "--loop goes with --replay" top top --loop
usage "top --once --loop" "--loop and --once" top top --once --loop --replay "$LOG"
usage "top --replay with --source" "--replay reads a log" top top --replay "$LOG" --source fd
usage "top --csv" "--csv: top prints" top top --once --csv
usage "--force without --attach" "--force goes with --attach" dump dump --force
usage "--attach with --source fd" "--attach and --source fd" list list --attach --source fd
usage "--libvirt-uri with --source qmp" "--libvirt-uri and --source qmp" \
	dump dump --libvirt-uri qemu:///system --source qmp
usage "--qmp without one --pid" "--qmp PATH needs exactly one --pid" dump dump --qmp /nonexistent
usage "--qmp with --source fd" "--qmp and --source fd" dump dump --qmp /x --pid 1 --source fd
usage "dump --save with --file alone" "--save writes" dump dump --file "$VCPU" --save "$TMP/s"
usage "record without --output or --log" "--output FILE or --log is needed" record record
usage "record --rotate-size without --output" "--rotate-size, --rotate-keep" \
	record record --log --rotate-size 1M
usage "record --rotate-keep without --rotate-size" "--rotate-keep goes with --rotate-size" \
	record record --output "$TMP/r.log" --rotate-keep 2
usage "record --fields without --log" "--fields, --skip-zero" \
	record record --output "$TMP/r.log" --fields exits
usage "record --csv without --log" "--csv goes with --log" \
	record record --output "$TMP/r.log" --csv
usage "record --log --pretty" "--pretty: the text log" record record --log --pretty
check "no usage error left a file behind" test ! -e "$TMP/r.log" -a ! -e "$TMP/s"
usage "replay --json --fields" "--fields and --skip-zero" replay replay --json --fields exits "$LOG"
usage "serve --hash-password with another option" "--hash-password reads" \
	serve serve --hash-password --listen 127.0.0.1:0
usage "serve --plan-method without --plan-interval" "the --plan-\\* options need" \
	serve serve --plan-method scan
usage "check --file with --vms" "--vms and --vcpus" check check --file "$VCPU" --vms 1
usage "demo --recording --no-top" "--recording plays in top" demo demo --recording --no-top
usage "demo --recording --vms" "--vms: the recording" demo demo --recording --vms 2
usage "demo --no-top --interval" "--interval is top's" demo demo --no-top --interval 1

# ---- the completion --------------------------------------------------------

# complete WORDS...: what the completion offers for the last word.
complete_words() {
	bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
		_kvmstats; printf "%s\n" "${COMPREPLY[@]}"' _ "$COMP" "$@"
}
check "the completion offers the commands" \
	test "$(complete_words kvmstats re | tr '\n' ' ')" = "record replay "
check "the completion offers sources after --source" \
	test "$(complete_words kvmstats record --source a | tr '\n' ' ')" = "auto attach "
check "the completion offers no --file to commands that refuse it" \
	test -z "$(for c in top list record serve plan; do
		complete_words kvmstats "$c" --fi | grep -x -- --file; done)"
check "the completion offers the images after --file A" \
	grep -qx "$VCPU" <(complete_words kvmstats dump --file "$VM" "${VCPU%.bin}")
# PIDs for --pid: a fixed number of processes, not one per /proc entry.
# Every program the completion may run is a shim that counts its runs,
# and nothing else is on its PATH.
mkdir -p "$TMP/bin"
for p in find ls grep sed awk cut tr sort uniq cat readlink xargs head; do
	real=$(command -v "$p") || continue
	printf '#!/bin/sh\necho %s >>"%s"\nexec %s "$@"\n' "$p" "$TMP/runs" "$real" \
		>"$TMP/bin/$p"
	chmod +x "$TMP/bin/$p"
done
: >"$TMP/runs"
PATH=$TMP/bin "$BASH" -c 'source "$1"; COMP_WORDS=(kvmstats top --pid ""); COMP_CWORD=3;
	_kvmstats; echo "${#COMPREPLY[@]}"' _ "$COMP" >"$TMP/comp.out" 2>"$TMP/comp.err"
runs=$(wc -l <"$TMP/runs")
procs=$(ls -d /proc/[0-9]* | wc -l)
check "--pid completion offers PIDs with $runs program run(s) for $procs processes" \
	test "$(cat "$TMP/comp.out")" -gt 0 -a "$runs" -le 2 -a ! -s "$TMP/comp.err"

# An error names a file once, whichever command opened it.
echo garbage >"$TMP/notalog"
"$KVMSTATS" top --once --replay "$TMP/notalog" >/dev/null 2>"$TMP/replay.err"
check "top --replay NOT_A_LOG: one line naming the file once" \
	test "$(wc -l <"$TMP/replay.err")" = 1 -a "$(grep -o "$TMP/notalog" "$TMP/replay.err" | wc -l)" = 1
# --qmp names a socket: a missing one is an error, no fall back.
"$KVMSTATS" dump --pid 1 --qmp "$TMP/nosock" >/dev/null 2>"$TMP/qmp.err"
rc=$?
check "dump --qmp MISSING: status 1, says the socket is missing" \
	test "$rc" = 1 -a -n "$(grep -- "--qmp $TMP/nosock: No such file or directory" "$TMP/qmp.err")"
# list --pid of a process that is no VMM: the error alone, no "no VMM on
# this host" after it.
"$KVMSTATS" list --pid $$ >"$TMP/list.out" 2>"$TMP/list.err"
rc=$?
check "list --pid NOT_A_VMM: status 1, the error only" \
	test "$rc" = 1 -a ! -s "$TMP/list.out" -a -n "$(grep 'is not a VMM' "$TMP/list.err")"

# --pid takes a comma-separated list too, in every command: the same as
# repeating it (two processes that are not VMMs: each named in an error).
sleep 30 &
S1=$!
track $S1
"$KVMSTATS" list --pid "$$,$S1" >/dev/null 2>"$TMP/l2.err"
rc=$?
check "list --pid A,B: each of the two named, status 1" \
	test "$rc" = 1 -a -n "$(grep "pid $$ " "$TMP/l2.err")" -a -n "$(grep "pid $S1 " "$TMP/l2.err")"
"$KVMSTATS" list --pid "$$" --pid "$S1" >/dev/null 2>"$TMP/l3.err"
check "list --pid A,B says what --pid A --pid B says" cmp -s "$TMP/l2.err" "$TMP/l3.err"
usage "--pid with an empty element" "--pid: '' is not a number" dump dump --pid "1,"
usage "--pid with a word in its list" "--pid: 'x' is not a number" replay replay --pid "1,x" "$LOG"

# plan of a process gone: its reason once (stderr), not again in the table.
sleep 0 &
G=$!
wait $G
"$KVMSTATS" plan --pid "$G" >"$TMP/pl.out" 2>"$TMP/pl.err"
rc=$?
check "plan --pid GONE: status 1, the reason said once" \
	test "$rc" = 1 -a "$(cat "$TMP/pl.out" "$TMP/pl.err" | grep -c "pid $G: no such process")" = 1
check "plan's table says what its last column is: the plan's own time" \
	grep -q "CONV PLAN_TOOK$" "$TMP/pl.out"

# serve --listen of the wrong form is a usage error (2), like any bad option.
usage "serve --listen bogus" "--listen: 'bogus' is not ADDR:PORT" serve serve --listen bogus
usage "serve --listen :99999" "--listen: ':99999': the port is not a number" serve serve --listen :99999
