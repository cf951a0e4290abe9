#!/usr/bin/env bash
# Install what the tests need, then run them all: unit tests, API conformance over HTTPS, real
# kubectl against the coordinator, crash recovery, bad input. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export ALOFT_REQUIRE_KUBECTL=1
# The integration tests start the real binaries: build them first.
cargo build --workspace --bins
cargo test --workspace 2>&1
