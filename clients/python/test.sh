#!/usr/bin/env bash
# make py-client-tests: the Python client's tests (clients/python/tests) with
# Debian's pytest (python3-pytest, installed when missing) on Debian's
# /usr/bin/python3.11, against a real spine serve that the tests start and
# stop: spine is built into build/bin first (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3.11}
if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "== installing python3-pytest"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pytest >/dev/null
fi
echo "== building spine (the module cmd/spine, in go.work's workspace)"
mkdir -p build/bin
$GO build -o build/bin/spine ./cmd/spine
echo "== pytest clients/python"
cd clients/python
SPINE_BIN="$PWD/../../build/bin/spine" "$PYTHON" -m pytest -q -p no:cacheprovider tests
