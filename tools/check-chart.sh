#!/usr/bin/env bash
# Static checks of charts/meridian: `helm lint --strict` with each values file under
# charts/meridian/ci/, and `helm template` of each through `kubernetes-validate --strict` for
# every Kubernetes version from 1.30 to 1.37. Run with Helm 4 and with Helm 3 (the two Helm
# majors the chart supports). Installs what it needs (tools/install-helm.sh,
# tools/install-kubernetes-validate.sh); fails loudly on the first problem.
#
# kubernetes-validate has no schema for custom resources (cert-manager's Certificate, the
# Prometheus Operator's ServiceMonitor): it skips them (warnings off) and checks the rest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
chart="$root/charts/meridian"
validate="$("$root/tools/install-kubernetes-validate.sh")"
versions=(1.30.0 1.31.0 1.32.0 1.33.0 1.34.0 1.35.0 1.36.0 1.37.0)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Helm keeps config, cache and repositories under XDG dirs: a throwaway set.
export XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/cache" XDG_DATA_HOME="$work/data"
# The API versions a cluster with the optional integrations serves (helm template has no
# cluster to ask).
api_versions=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions cert-manager.io/v1/Certificate)
failed=0
for major in 4 3; do
  helm="$("$root/tools/install-helm.sh" "$major")"
  echo "check-chart: $("$helm" version --short) and kubernetes-validate $("$validate" --version)"
  for v in "${versions[@]}"; do mkdir -p "$work/$major/$v"; done
  for values in "$chart"/ci/*.yaml; do
    name="$(basename "$values")"
    # Member mode installs into meridian-system; the federation may go anywhere.
    if ! "$helm" lint --strict --namespace meridian-system -f "$values" "$chart" >"$work/lint.txt" 2>&1; then
      cat "$work/lint.txt" >&2
      echo "check-chart: helm $major lint --strict failed with $name" >&2
      failed=1
    fi
    for v in "${versions[@]}"; do
      out="$work/$major/$v/$name"
      if ! "$helm" template meridian "$chart" --namespace meridian-system -f "$values" \
        --kube-version "$v" "${api_versions[@]}" >"$out"; then
        echo "check-chart: helm $major template failed with $name for Kubernetes $v" >&2
        failed=1
        continue
      fi
      # A render without objects would validate trivially.
      grep -q '^kind: \(Deployment\|DaemonSet\)$' "$out" || { echo "check-chart: $name rendered no workload" >&2; failed=1; }
    done
  done
  # One validator run per version over every render (its start-up dominates).
  for v in "${versions[@]}"; do
    if ! "$validate" --strict --quiet --no-warn -k "$v" "$work/$major/$v"/*.yaml; then
      echo "check-chart: helm $major's renders are not valid Kubernetes $v (see above)" >&2
      failed=1
    fi
  done
  echo "check-chart: helm $major: $(ls "$chart"/ci | tr '\n' ' ')lint, render and validate for Kubernetes ${versions[0]%.0} to ${versions[-1]%.0}"
done
[ "$failed" = 0 ] || echo "check-chart: FAILED" >&2
exit "$failed"
