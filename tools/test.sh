#!/usr/bin/env bash
# Runs Meridian's whole test suite: unit, integration and end-to-end tests.
# Installs the tools the tests drive (kubectl 1.37) first and fails loudly if it cannot.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export KUBECTL="$("$root/tools/install-kubectl.sh")"
echo "using kubectl at $KUBECTL ($("$KUBECTL" version --client | head -1))"
# End-to-end tests start the workspace's binaries: build them all first.
cargo build --workspace --bins
cargo nextest run --workspace --no-fail-fast "$@"
