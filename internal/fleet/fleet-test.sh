#!/usr/bin/env bash
# make fleet-test: builds spine and versitygw (a real S3-compatible server,
# from the Go module proxy, cached in build/bin), installs HAProxy from Debian
# when missing, and runs internal/fleet's TestFleet: three spine serve
# replicas sharing versitygw as their session store, behind HAProxy with
# round-robin (no stickiness) and by session id, all on loopback (docs/performance.md,
# "A fleet"). The FLEET lines it prints are the figures. Then the session
# store's tests run over versitygw too: the cloudstore module's (the Store's
# suite, and service's and the MCP server's tests that open an S3 store).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
VERSITYGW_VERSION=v1.8.0
mkdir -p build/bin
if [ ! -x build/bin/versitygw ] || [ "$(cat build/bin/versitygw.version 2>/dev/null)" != "$VERSITYGW_VERSION" ]; then
	echo "== building versitygw $VERSITYGW_VERSION into build/bin (long on a fresh machine, cached after)"
	GOBIN="$PWD/build/bin" $GO install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
	echo "$VERSITYGW_VERSION" > build/bin/versitygw.version
fi
if ! command -v haproxy >/dev/null; then
	echo "== installing haproxy"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null
fi
echo "== building spine (the module cmd/spine, in go.work's workspace)"
$GO build -o build/bin/spine ./cmd/spine
echo "== TestFleet"
SPINE_FLEET_SPINE="$PWD/build/bin/spine" SPINE_FLEET_VERSITYGW="$PWD/build/bin/versitygw" \
	SPINE_FLEET_HAPROXY="$(command -v haproxy)" \
	$GO test -count=1 -v -timeout 10m -run '^TestFleet$' ./internal/fleet
echo "== the session store's tests over versitygw"
SPINE_FLEET_VERSITYGW="$PWD/build/bin/versitygw" $GO test -count=1 ./cloudstore
