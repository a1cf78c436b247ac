#!/usr/bin/env bash
# Runs Meridian's whole test suite: unit, integration and kubectl end-to-end tests.
# Installs the tools the tests drive (kubectl 1.37) first; fails loudly if it cannot.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export KUBECTL="$("$root/tools/install-kubectl.sh")"
echo "using kubectl at $KUBECTL"
cargo nextest run --workspace --no-fail-fast "$@"
