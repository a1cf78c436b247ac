#!/usr/bin/env bash
# Installs the official Kubernetes Python client (PyPI package kubernetes) into
# .tools/python-client and prints the path of that venv's python.
set -euo pipefail
. "$(dirname "$0")/pip-tool.sh"
lock_tool python-client
python="$root/.tools/python-client/bin/python"
if ! "$python" -c 'import kubernetes' 2>/dev/null; then
  python="$(pip_venv python-client 'kubernetes>=33,<38')"
fi
"$python" -c 'import kubernetes' >&2
echo "$python"
