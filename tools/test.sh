#!/usr/bin/env bash
# Runs Meridian's whole test suite: unit, integration and end-to-end tests.
# Installs the tools the tests drive (kubectl 1.37, Helm 4.3 and 3.17, etcd 3.5; umoci, skopeo,
# runc) and the build needs (protoc) first and fails loudly if it cannot.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export KUBECTL="$("$root/tools/install-kubectl.sh")"
echo "using kubectl at $KUBECTL ($("$KUBECTL" version --client | head -1))"
export ETCD="$("$root/tools/install-etcd.sh")"
echo "using etcd at $ETCD ($("$ETCD" --version | head -1))"
# .cargo/config.toml points cargo at tools/protoc, which would install it on first use; doing
# it here keeps the install's output out of the build.
echo "using protoc at $("$root/tools/install-protoc.sh")"
# Lint gates, independent of the tests: formatting and the offline dependency audit (licenses,
# sources, bans, workspace dependencies) here, clippy within the build below. A failure still
# lets the tests run and fails the whole at the end.
lints=0
cargo fmt --all --check || lints=1
python3 "$root/tools/check-deps.py" || lints=1
# The container images: built into target/images and checked with skopeo, umoci and runc
# (root or sudo; installs those from Debian). First, so later tests can run them; a failure
# there still lets the rest run, and fails the whole at the end.
images=0
"$root/tools/test-images.sh" || images=$?
# charts/meridian: helm lint --strict and helm template | kubernetes-validate --strict for
# Kubernetes 1.30 to 1.37, with Helm 4 and Helm 3 (installs both and the validator).
chart=0
"$root/tools/check-chart.sh" || chart=1
# (Assigned apart from `export`, whose status would hide an installer's failure.)
HELM="$("$root/tools/install-helm.sh" 4)"
HELM3="$("$root/tools/install-helm.sh" 3)"
export HELM HELM3
echo "using helm at $HELM ($("$HELM" version --short)) and $HELM3 ($("$HELM3" version --short))"
# fed-api's types without kube: the model the scheduler's pure core decides over.
cargo check -p fed-api --no-default-features
# End-to-end tests start the workspace's binaries: build them all first, together with the
# tests. Built alone, the binaries would get other features (the tests' dev-dependencies turn
# on tokio's `test-util`), so tokio and everything above it would be compiled twice, and the
# test build's binaries would replace these anyway.
# Clippy runs inside this build, as `cargo clippy` itself does it: clippy-driver wraps rustc
# for the workspace's crates (RUSTC_WORKSPACE_WRAPPER, CLIPPY_ARGS). A separate
# `cargo clippy --all-targets` would compile the whole dependency tree once more in check mode
# (about 9 minutes on 2 cores). Its lints stay warnings so the tests still run;
# tools/lint-summary.py prints them and fails the lint gate, as `-D warnings` would. nextest's
# build sees the same environment (the wrapper is part of cargo's fingerprint), so it finds
# everything built; tools/build-images.sh drops it.
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$RUSTC_WORKSPACE_WRAPPER" ] && command -v rustup >/dev/null; then
  rustup component add clippy
fi
[ -x "$RUSTC_WORKSPACE_WRAPPER" ] || {
  echo "test.sh: $RUSTC_WORKSPACE_WRAPPER is missing: install clippy for this toolchain" >&2
  exit 1
}
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS=""
set +e
cargo build --workspace --all-targets --locked --message-format=json |
  python3 "$root/tools/lint-summary.py"
built=("${PIPESTATUS[@]}")
set -e
[ "${built[0]}" -eq 0 ] || { echo "test.sh: the workspace does not build (see above)" >&2; exit 1; }
[ "${built[1]}" -eq 0 ] || lints=1
tests=0
cargo nextest run --workspace --no-fail-fast "$@" || tests=$?
if [ "$lints" -ne 0 ]; then
  echo "test.sh: a lint gate failed (cargo fmt --check, tools/check-deps.py, or clippy's or rustc's warnings in the build; see above)" >&2
  exit 1
fi
if [ "$chart" -ne 0 ]; then
  echo "test.sh: the chart's static checks failed (see tools/check-chart.sh's output above)" >&2
  exit 1
fi
if [ "$images" -ne 0 ]; then
  echo "test.sh: the image tests failed (see tools/test-images.sh's output above)" >&2
  exit "$images"
fi
exit "$tests"
