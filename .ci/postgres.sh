# Sourced by .ci/run: starts a throwaway PostgreSQL server for the tests of
# store/postgres and exports DEPUTY_TEST_POSTGRES (a DSN) while it runs.
# It installs Debian's postgresql package when the server programs are
# missing, initializes a cluster in a temporary directory owned by a non-root
# user (PostgreSQL refuses to run as root), listens on a Unix socket only,
# and stops and removes the cluster when the shell exits.
#
#   source .ci/postgres.sh && postgres_start
#   go test ./store/postgres/
#   postgres_stop   # or let the EXIT trap do it

postgres_bin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && { echo "$d"; return 0; }
	done
	return 1
}

postgres_start() {
	local bin
	if ! bin="$(postgres_bin)"; then
		if [ "$(id -u)" = 0 ]; then
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
		else
			sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
		fi
		bin="$(postgres_bin)"
	fi
	PG_TMP="$(mktemp -d)"
	chmod 755 "$PG_TMP"
	local run=()
	if [ "$(id -u)" = 0 ]; then
		# The package creates the postgres user; a cluster must not be owned by root.
		id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
		chown postgres "$PG_TMP"
		run=(runuser -u postgres --)
	fi
	"${run[@]}" "$bin/initdb" -D "$PG_TMP/data" -U deputy --auth=trust -E UTF8 >/dev/null
	"${run[@]}" "$bin/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/log" -w \
		-o "-c listen_addresses='' -k $PG_TMP -c fsync=on" start >/dev/null
	PG_RUN=("${run[@]}")
	PG_BIN="$bin"
	export DEPUTY_TEST_POSTGRES="host=$PG_TMP user=deputy dbname=postgres sslmode=disable"
	trap postgres_stop EXIT
}

postgres_stop() {
	[ -n "${PG_TMP:-}" ] || return 0
	"${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$PG_TMP"
	unset PG_TMP DEPUTY_TEST_POSTGRES
}
