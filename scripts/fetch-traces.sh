#!/bin/sh
# fetch-traces.sh DIR — puts the Mooncake FAST'25 traces that `llbsim sweep
# --traces` and `llbsim bench --scenario mooncake-*` replay into DIR, and
# checks them against the SHA-256 sums of the pinned release.
#
# Source: github.com/kvcache-ai/Mooncake at commit $MOONCAKE_COMMIT (the
# commit that added FAST25-release/traces; nothing there changed since),
# files FAST25-release/traces/{conversation,synthetic}_trace.jsonl (3.0 MB
# and 1.1 MB, plain files in git, not LFS).
#
# With MOONCAKE_SRC set, the files are copied from there (a checkout of the
# repository, its FAST25-release/traces directory, or any directory holding
# the two files) and nothing is downloaded. Otherwise they are downloaded
# from GitHub's raw file host, which needs HTTPS to it: machines that reach
# only package registries (CI among them) cannot, so the target is not part
# of `make test`; copy the files there and use MOONCAKE_SRC.
set -eu
dir=${1:?usage: fetch-traces.sh DIR}
commit=${MOONCAKE_COMMIT:-3cca71daccf2a7afb8fe3f0295358f70e3a69fdb}
base="https://raw.githubusercontent.com/kvcache-ai/Mooncake/$commit/FAST25-release/traces"
mkdir -p "$dir"
fetch() { # fetch FILE SHA256
	out="$dir/$1"
	if [ -f "$out" ] && echo "$2  $out" | sha256sum -c --status; then
		echo "traces: $out is already there"
		return
	fi
	if [ -n "${MOONCAKE_SRC:-}" ]; then
		for cand in "$MOONCAKE_SRC/$1" "$MOONCAKE_SRC/traces/$1" "$MOONCAKE_SRC/FAST25-release/traces/$1"; do
			if [ -f "$cand" ]; then
				cp "$cand" "$out.part"
				break
			fi
		done
		[ -f "$out.part" ] || { echo "traces: $1 is not in $MOONCAKE_SRC" >&2; exit 1; }
	elif command -v curl >/dev/null 2>&1; then
		curl -fsSL --retry 2 -o "$out.part" "$base/$1" || { echo "traces: cannot download $base/$1 (no route to GitHub? set MOONCAKE_SRC)" >&2; rm -f "$out.part"; exit 1; }
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$out.part" "$base/$1" || { echo "traces: cannot download $base/$1 (no route to GitHub? set MOONCAKE_SRC)" >&2; rm -f "$out.part"; exit 1; }
	else
		echo "traces: neither curl nor wget is installed (apt-get install curl), or set MOONCAKE_SRC" >&2
		exit 1
	fi
	if ! echo "$2  $out.part" | sha256sum -c --status; then
		echo "traces: $1 does not match the pinned release's SHA-256 $2" >&2
		rm -f "$out.part"
		exit 1
	fi
	mv "$out.part" "$out"
	echo "traces: $out"
}
fetch conversation_trace.jsonl b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df
fetch synthetic_trace.jsonl bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131
