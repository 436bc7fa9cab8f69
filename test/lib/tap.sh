# test/lib/tap.sh: the TAP producer the bash test scripts share (test/tap/*.t),
# as test/lib/bctest.py's Tap is the Python scripts'.  Sourced:
#
#   . "$(dirname "$0")/../lib/tap.sh"
#
#   ok GOT EXPECTED NAME   "ok N - NAME" when GOT is EXPECTED; otherwise
#                          "not ok N - NAME" and "#   got 'GOT', expected
#                          'EXPECTED'" (on stdout, and on stderr, which prove
#                          shows without -v)
#   ok_rc STATUS NAME      the same for a status: passes when STATUS is 0
#                          (ok_rc $? "...", ok_rc "$([ ... ]; echo $?)" "...")
#
# $n counts the tests, $failed the failures: a script prints its plan
# ("1..N" first, or "1..$n" at the end) and ends with [ "$failed" -eq 0 ].
n=0
failed=0

ok() {
  n=$((n + 1))
  if [ "$1" = "$2" ]; then
    echo "ok $n - $3"
  else
    echo "not ok $n - $3"
    echo "#   got '$1', expected '$2'"
    echo "#   got '$1', expected '$2'" >&2
    failed=$((failed + 1))
  fi
}

ok_rc() {
  n=$((n + 1))
  if [ "$1" = 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    failed=$((failed + 1))
  fi
}
