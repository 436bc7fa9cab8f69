#!/usr/bin/env bash
# check_tools.t: a suite that needs a program checks for it and fails naming
# it (test/lib/check-tools, test/lib/tools.txt), and every package that list
# names is one tools/install-deps installs.  (Whether the list forgets a
# program is what .ci/run's fresh Debian 12 tree finds.)
set -uo pipefail
cd "$(dirname "$0")/../.."
list=test/lib/tools.txt
. test/lib/tap.sh

S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT

# 1. every line: suite, program, package
malformed=$(grep -v -e '^#' -e '^[[:space:]]*$' "$list" | awk 'NF != 3' | wc -l)
ok_rc "$([ "$malformed" = 0 ]; echo $?)" "every line of tools.txt names a suite, a program and a package"

# 2. every package it names is installed by tools/install-deps
pkgs=" $(tools/install-deps --list | tr '\n' ' ') "
eval "$(tools/debian-release)"
unlisted=""
for p in $(grep -v -e '^#' -e '^[[:space:]]*$' "$list" | awk '{print $3}' | sed "s/@PG@/$pg/; s/@LLVM@/$llvm/" | sort -u); do
  case "$pkgs" in *" $p "*) ;; *) unlisted+=" $p" ;; esac
done
ok_rc "$([ -z "$unlisted" ]; echo $?)" "tools/install-deps installs every package tools.txt names${unlisted:+ (not:$unlisted)}"

# 3. here, after tools/install-deps, nothing is missing
out=$(test/lib/check-tools --all); rc=$?
ok_rc "$([ $rc = 0 ] && [ -z "$out" ]; echo $?)" "check-tools --all finds every program here${out:+: $out}"

# 4. a PATH holding every listed program but one: the suite fails naming it
mkdir -p "$S/bin"
for prog in $(grep -v -e '^#' -e '^[[:space:]]*$' "$list" | awk '$2 !~ /^\// {print $2}' | sort -u) \
            bash env dirname sed awk grep; do
  prog=${prog//@LLVM@/$llvm}
  p=$(command -v "$prog") && ln -sf "$p" "$S/bin/$prog"
done
for case in "pgtap jq jq" "pgtap pg_prove libtap-parser-sourcehandler-pgtap-perl" \
            "versions git git" "tap swtpm swtpm" "agent systemd-socket-activate systemd" \
            "regress runuser util-linux"; do
  set -- $case
  rm -rf "$S/b2"; cp -a "$S/bin" "$S/b2"; rm -f "$S/b2/$2"
  out=$(PATH="$S/b2" "$(command -v bash)" test/lib/check-tools "$1"); rc=$?
  ok_rc "$([ $rc = 1 ] && grep -q "^missing tool: $2 (suite $1; Debian package $3;" <<<"$out" \
        && [ "$(wc -l <<<"$out")" = 1 ]; echo $?)" "without $2 the $1 suite's check fails naming $2 and $3 only"
done
# the same PATH with nothing removed passes for those suites
out=$(PATH="$S/bin" "$(command -v bash)" test/lib/check-tools pgtap versions tap agent regress); rc=$?
ok_rc "$([ $rc = 0 ]; echo $?)" "with every program the same check passes${out:+: $out}"

# 5. a library file that is not there (the clang runtime's, as on a fresh machine)
mkdir -p "$S/t/test/lib" "$S/t/tools"; cp tools/debian-release "$S/t/tools/"; cp test/lib/check-tools "$S/t/test/lib/"
printf 'fuzz /nonexistent/llvm-*/libclang_rt.fuzzer-x86_64.a libclang-rt-14-dev\n' > "$S/t/test/lib/tools.txt"
out=$(bash "$S/t/test/lib/check-tools" fuzz); rc=$?
ok_rc "$([ $rc = 1 ] && grep -q 'missing tool: /nonexistent/llvm-\*/libclang_rt.fuzzer-x86_64.a (suite fuzz; Debian package libclang-rt-14-dev' <<<"$out"; echo $?)" \
   "a missing runtime library fails the fuzz suite naming libclang-rt-14-dev"

# 6. an unreadable list is an error, not a pass
rm "$S/t/test/lib/tools.txt"
bash "$S/t/test/lib/check-tools" fuzz >/dev/null 2>&1; rc=$?
ok_rc "$([ $rc = 2 ]; echo $?)" "without its list check-tools fails (exit 2)"

# 7. run-all checks every suite's tools before running it, and the build's
grep -q 'test/lib/check-tools "$name"' test/run-all && grep -q 'test/lib/check-tools build' test/run-all
ok_rc $? "test/run-all checks each suite's programs and the build's"

echo "1..$n"
[ "$failed" = 0 ]
