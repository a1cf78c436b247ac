#!/usr/bin/env bash
# Installs kubernetes-validate 1.37 (PyPI; Kubernetes' OpenAPI schemas 1.25 to 1.37) into
# .tools/venv and prints its path. Idempotent; fails loudly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.tools/venv"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate>=1.37,<1.38' >&2
fi
"$venv/bin/kubernetes-validate" --version >/dev/null
echo "$venv/bin/kubernetes-validate"
