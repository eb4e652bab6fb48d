# Sourced by .ci/run: the temporal module (temporal/) against a real
# Temporal development server. It builds temporal/internal/devserver once
# into a cache directory (the cold build of go.temporal.io/server takes
# minutes and about 2.4 GB; DEPUTY_TEMPORAL_CACHE moves it), starts it on
# 127.0.0.1, exports DEPUTY_TEST_TEMPORAL and DEPUTY_TEST_TEMPORAL_NAMESPACE,
# vets and tests the module (the scale test starts its two worker processes
# itself), and stops the server when the phase ends.
#
#   source .ci/temporal.sh && temporal_phase

temporal_phase() (
	set -euo pipefail
	local cache="${DEPUTY_TEMPORAL_CACHE:-${TMPDIR:-/tmp}/deputy-temporal-cache}"
	mkdir -p "$cache"
	(cd temporal/internal/devserver && GOCACHE="$cache/gocache" go build -o "$cache/devserver" .)

	local dir
	dir="$(mktemp -d)"
	"$cache/devserver" -ready "$dir/ready" >"$dir/server.log" 2>&1 &
	local pid=$!
	trap 'kill '"$pid"' 2>/dev/null; wait '"$pid"' 2>/dev/null; rm -rf '"$dir" EXIT
	local i
	for i in $(seq 1 240); do
		[ -s "$dir/ready" ] && break
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "temporal dev server exited before it was ready:" >&2
			cat "$dir/server.log" >&2
			return 1
		fi
		sleep 0.5
	done
	if [ ! -s "$dir/ready" ]; then
		echo "temporal dev server not ready after 120 s" >&2
		return 1
	fi
	local hostport ns
	read -r hostport ns <"$dir/ready"
	export DEPUTY_TEST_TEMPORAL="$hostport" DEPUTY_TEST_TEMPORAL_NAMESPACE="$ns"
	echo "temporal dev server at $hostport, namespace $ns"

	# The official AG-UI client watches a tree on Temporal: it comes from
	# agui/clienttest, which the agui_client phase installs (or this one).
	(cd agui/clienttest && { [ -d node_modules ] || npm ci --no-audit --no-fund; })
	export DEPUTY_TEST_AGUI_CLIENT=1

	cd temporal
	go vet ./...
	go test -race -count=1 -timeout 20m -skip 'Scale' ./...
	# Without -race: 1,000 child workflows, two worker processes, one killed.
	go test -count=1 -timeout 20m -run 'Scale' -v .
	# deputy's workflow tree against a bare Temporal child workflow and
	# activity doing the same model call, per child.
	go test -count=1 -run '^$' -bench '^BenchmarkFloor$' -benchtime 3x .
)
