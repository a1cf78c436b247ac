#!/usr/bin/env bash
# Makes sure nginx is installed (apt-get) with its stream module (for the TLS passthrough
# comparison: `stream` + `ssl_preread`) and prints its path; fails loudly otherwise.
set -euo pipefail
stream_module=/usr/lib/nginx/modules/ngx_stream_module.so
if ! command -v nginx >/dev/null 2>&1 || [ ! -e "$stream_module" ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-nginx: need root or sudo for apt-get" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get install -y nginx libnginx-mod-stream >&2 \
    || { $sudo apt-get update >&2 && $sudo apt-get install -y nginx libnginx-mod-stream >&2; }
fi
path="$(command -v nginx || true)"
[ -n "$path" ] || { echo "install-nginx: nginx is still not on PATH" >&2; exit 1; }
"$path" -v >&2
echo "$path"
