#!/usr/bin/env bash
# Makes sure the OCI tools that check and run Meridian's images are installed (Debian's
# umoci, skopeo and runc, plus jq and curl), installing them with apt-get; fails loudly otherwise.
set -euo pipefail
need=()
for t in umoci skopeo runc jq curl; do command -v "$t" >/dev/null 2>&1 || need+=("$t"); done
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-image-tools: need root or sudo for apt-get (${need[*]})" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-image-tools: installing ${need[*]}" >&2
$sudo apt-get install -y "${need[@]}" >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y "${need[@]}" >&2; }
for t in "${need[@]}"; do
  command -v "$t" >/dev/null 2>&1 || { echo "install-image-tools: $t is still not on PATH" >&2; exit 1; }
done
