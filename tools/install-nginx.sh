#!/usr/bin/env bash
# Makes sure nginx is installed (apt-get) and prints its path; fails loudly otherwise.
set -euo pipefail
if ! command -v nginx >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-nginx: need root or sudo for apt-get" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get install -y nginx >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y nginx >&2; }
fi
path="$(command -v nginx || true)"
[ -n "$path" ] || { echo "install-nginx: nginx is still not on PATH" >&2; exit 1; }
"$path" -v >&2
echo "$path"
