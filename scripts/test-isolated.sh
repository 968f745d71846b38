#!/bin/sh
# test-isolated.sh GO [go test flags...]: run the test suite from a copy of
# the checkout that has nothing beside it, as a user's fresh `git clone`
# does: a test that reads a file outside the repository (../shared, a
# sibling checkout) fails here instead of passing on a developer machine.
#
# The copy holds what git would clone plus untracked, not-ignored files (so
# uncommitted work is tested too), and lives at a fixed path so Go's build
# and test caches stay warm between runs.
set -eu
go=$1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
# One copy per checkout (two checkouts testing at once must not share it).
root=${LLB_ISOLATED_DIR:-${TMPDIR:-/tmp}/llb-isolated-$(printf %s "$src" | cksum | cut -d' ' -f1)}
dst=$root/llb
rm -rf "$root"
mkdir -p "$dst"
cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf - | tar -C "$dst" -xf -
else
	tar --exclude=./bin --exclude=./state -cf - . | tar -C "$dst" -xf -
fi
# Nothing beside the copy: its parent holds the copy alone.
if [ "$(ls -A "$root")" != llb ]; then
	echo "test-isolated: $root holds more than the copy" >&2
	exit 1
fi
cd "$dst"
echo "llb: testing a copy of the checkout at $dst (nothing beside it)"
status=0
POLLER_TESTS='Stream|Migration|SendBound|HTTP10|KeepAlive|Shutdown|Departure|Hostile|PD_|CacheTruth|Usage'
"$go" test "$@" ./... || status=$?
# The stream tests again with the stream poller on (gateway/streamhijack.go):
# a matrix over the same tests, not copies of them.
if [ "$(uname -s)" = Linux ]; then
	echo "llb: the gateway's stream tests with LLB_STREAM_POLLER=1"
	LLB_STREAM_POLLER=1 "$go" test "$@" -run "$POLLER_TESTS" ./gateway/ || status=$?
fi
cd /
rm -rf "$root"
exit $status
