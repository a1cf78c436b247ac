#!/usr/bin/env bash
# Builds Meridian's container images (tools/build-images.sh, into target/images) and checks
# them with tools other than the one that wrote them: skopeo reads each OCI archive and the
# layout, umoci unpacks each image into a runtime bundle, runc runs it. Checked per image:
# user 65532:65532, entrypoint, OCI labels, compressed size within the budget, no build
# path inside the binary, the Containerfile's target of that name says the same, `<binary> --help` runs on the empty
# base as 65532 from a read-only root; the API server image also serves (HTTPS, kubectl) as
# 65532. A second build must give the same digests. Prints one line per check and a count.
#
#   tools/test-images.sh            (root, or sudo for runc and apt-get)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

budget=20000000 # bytes, compressed (layers + config + manifest)
uid=65532
out="$root/target/images"
default_source="https://github.com/meridian-dev/meridian"

"$root/tools/install-image-tools.sh"
KUBECTL="${KUBECTL:-$("$root/tools/install-kubectl.sh")}"
run_as_root=""
[ "$(id -u)" = 0 ] || run_as_root="sudo"

work="$(mktemp -d)"
prefix="meridian-image-test-$$"
cleanup() {
  for c in $($run_as_root runc list -q 2>/dev/null | grep "^$prefix-" || true); do
    $run_as_root runc delete -f "$c" >/dev/null 2>&1 || true
  done
  $run_as_root rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
# check WHAT FUNCTION ARGS...: runs the function in a subshell that stops at its first failing
# command, and counts the result.
check() {
  local what="$1" rc
  shift
  set +e
  (
    set -e
    "$@"
  ) >"$work/check.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "ok    $what"
  else
    failed=$((failed + 1))
    echo "FAIL  $what"
    sed 's/^/      /' "$work/check.log"
  fi
}
fail() {
  echo "$*"
  exit 1
}

# --- build twice ------------------------------------------------------------------------------
start=$(date +%s)
"$root/tools/build-images.sh" --out "$out"
echo "images built in $(($(date +%s) - start))s"
start=$(date +%s)
"$root/tools/build-images.sh" --out "$work/again" >/dev/null
echo "images built again in $(($(date +%s) - start))s"

want_version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)"
want_revision="$(git rev-parse HEAD)"
git diff --quiet HEAD -- || want_revision="$want_revision-dirty"
names=()
while IFS= read -r n; do names+=("$n"); done < <(jq -r '.[].name' "$out/images.json")

field() { jq -r --arg n "$1" ".[] | select(.name == \$n) | .$2" "$out/images.json"; }

same_digests() {
  diff <(jq -r '.[] | "\(.name) \(.digest)"' "$out/images.json") \
    <(jq -r '.[] | "\(.name) \(.digest)"' "$work/again/images.json")
}
check "a second build gives the same digests" same_digests

every_image() {
  [ "${names[*]}" = "fed-controllers fed-scheduler fedctl federation-apiserver lb-agent" ] ||
    fail "images.json names ${names[*]}"
  local registry="${MERIDIAN_IMAGE_REGISTRY:-ghcr.io/meridian-dev}" n
  for n in "${names[@]}"; do
    [ "$(field "$n" reference)" = "$registry/$n:$want_version" ] || fail "$n is named $(field "$n" reference)"
    [ "$(field "$n" ref)" = "$n:$want_version" ] || fail "$n's ref name is $(field "$n" ref)"
  done
}
check "every image is built, named <registry>/<name>:<version>" every_image

# --- per image --------------------------------------------------------------------------------

config_and_labels() {
  local n="$1" cfg="$work/$1.config.json"
  skopeo inspect --config "oci-archive:$out/$n.oci.tar" >"$cfg"
  local got
  got="$(jq -c '[.config.User, .config.Entrypoint, .os, .architecture]' "$cfg")"
  [ "$got" = "[\"$uid:$uid\",[\"/usr/local/bin/$n\"],\"linux\",\"amd64\"]" ] || fail "user/entrypoint/platform: $got"
  local l=org.opencontainers.image
  for kv in "$l.source=${MERIDIAN_IMAGE_SOURCE:-$default_source}" "$l.version=$want_version" \
    "$l.revision=$want_revision" "$l.licenses=Apache-2.0" "$l.title=$n"; do
    got="$(jq -r --arg k "${kv%%=*}" '.config.Labels[$k] // "(none)"' "$cfg")"
    [ "$got" = "${kv#*=}" ] || fail "label ${kv%%=*} is $got, want ${kv#*=}"
  done
}

digests_agree() {
  local n="$1" want got
  want="$(field "$n" digest)"
  got="$(skopeo inspect --format '{{.Digest}}' "oci:$out/oci:$(field "$n" ref)")"
  [ "$got" = "$want" ] || fail "skopeo reads $got from the layout, images.json says $want"
  got="$(skopeo inspect --format '{{.Digest}}' "oci-archive:$out/$n.oci.tar")"
  [ "$got" = "$want" ] || fail "skopeo reads $got from the archive, images.json says $want"
}

within_budget() {
  local n="$1" manifest="$work/$1.manifest.json" size
  skopeo inspect --raw "oci-archive:$out/$n.oci.tar" >"$manifest"
  size=$(($(jq '[.layers[].size] + [.config.size] | add' "$manifest") + $(stat -c %s "$manifest")))
  echo "$n: $size bytes compressed"
  [ "$size" -le "$budget" ] || fail "$size bytes compressed, over the budget of $budget"
}

containerfile_agrees() {
  local n="$1"
  python3 "$root/tools/check_containerfile.py" "$root/images/Containerfile" "$n" "$work/$n.config.json" \
    --build-arg "VERSION=$want_version" --build-arg "REVISION=$want_revision" \
    --build-arg "SOURCE=${MERIDIAN_IMAGE_SOURCE:-$default_source}"
}

# umoci writes a runtime bundle whose config.json runs the image's entrypoint as its user.
unpack() {
  local n="$1" bundle="$work/bundle-$1"
  $run_as_root umoci unpack --image "$out/oci:$(field "$n" ref)" "$bundle" >/dev/null
  local got
  got="$($run_as_root jq -c '[.process.user.uid, .process.user.gid, .process.args]' "$bundle/config.json")"
  [ "$got" = "[$uid,$uid,[\"/usr/local/bin/$n\"]]" ] || fail "bundle runs $got"
}

no_build_paths() {
  local bin="$work/bundle-$1/rootfs/usr/local/bin/$1" cargo_home="${CARGO_HOME:-$HOME/.cargo}"
  [ -f "$bin" ] || fail "no $bin"
  for p in "$root" "$cargo_home" "$(cd "${CARGO_TARGET_DIR:-$root/target}" && pwd)"; do
    if $run_as_root grep -qaF "$p" "$bin"; then fail "the binary holds the build path $p"; fi
  done
}

# Edits a bundle's config.json with a jq program.
edit_bundle() {
  local cfg="$1/config.json"
  $run_as_root jq "$2" "$cfg" >"$work/config.tmp"
  $run_as_root cp "$work/config.tmp" "$cfg"
}

runs_help() {
  local n="$1" bundle="$work/bundle-$1" id="$prefix-$1"
  edit_bundle "$bundle" '.process.terminal = false | .process.args += ["--help"] | .root.readonly = true'
  $run_as_root runc run --bundle "$bundle" "$id" </dev/null >"$work/$n.help" 2>&1 ||
    fail "exit $? from --help: $(head -5 "$work/$n.help")"
  grep -q '^Usage: ' "$work/$n.help" || fail "no usage in: $(head -5 "$work/$n.help")"
}

for n in "${names[@]}"; do
  check "$n: user $uid, entrypoint and labels" config_and_labels "$n"
  check "$n: skopeo reads the same digest from the layout and the archive" digests_agree "$n"
  check "$n: compressed size within $((budget / 1000000)) MB" within_budget "$n"
  check "$n: the Containerfile's target $n says the same" containerfile_agrees "$n"
  check "$n: umoci unpacks a bundle that runs it as $uid" unpack "$n"
  check "$n: no build path in the binary" no_build_paths "$n"
  check "$n: --help runs on the empty base (runc, read-only root)" runs_help "$n"
done

# --- the API server serves from its image ---------------------------------------------------
# A copy of its bundle in the host's network namespace, with a host directory as its data dir,
# so that the generated admin.kubeconfig reaches it from here.
apiserver_serves() {
  local bundle="$work/bundle-serve" id="$prefix-serve" data="$work/data"
  $run_as_root umoci unpack --image "$out/oci:$(field federation-apiserver ref)" "$bundle" >/dev/null
  mkdir -p "$data"
  $run_as_root chown "$uid:$uid" "$data"
  edit_bundle "$bundle" '.process.terminal = false
    | .process.args += ["--secure-port", "0", "--address-file", "/data/address", "--data-dir", "/data"]
    | .root.readonly = true
    | .linux.namespaces |= map(select(.type != "network"))
    | .mounts += [{"destination": "/data", "type": "bind", "source": "'"$data"'", "options": ["rbind", "rw"]}]'
  $run_as_root runc run --detach --bundle "$bundle" "$id" </dev/null >"$work/serve.log" 2>&1 ||
    fail "runc run: $(cat "$work/serve.log")"
  local deadline=$(($(date +%s) + 60))
  until [ -s "$data/address" ] && [ -s "$data/admin.kubeconfig" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "no address after 60s: $(tail -5 "$work/serve.log")"
    sleep 0.2
  done
  local address
  address="$(cat "$data/address")"
  [ "$(curl -ksS "https://$address/healthz")" = ok ] || fail "/healthz did not answer ok"
  # A write and a read through the admin credential: the store on the data dir works.
  "$KUBECTL" --kubeconfig "$data/admin.kubeconfig" create namespace image-test >/dev/null
  "$KUBECTL" --kubeconfig "$data/admin.kubeconfig" get namespace image-test -o name | grep -qx namespace/image-test ||
    fail "kubectl could not read back namespace image-test"
  local pid ids
  pid="$($run_as_root runc state "$id" | jq .pid)"
  ids="$(awk '/^Uid:|^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status" | sort -u)"
  [ "$ids" = "$uid $uid $uid $uid" ] || fail "runs with ids: $ids"
  [ "$(stat -c %u:%g "$data/admin.kubeconfig")" = "$uid:$uid" ] || fail "files written as $(stat -c %u:%g "$data/admin.kubeconfig")"
  $run_as_root runc kill "$id" TERM
  deadline=$(($(date +%s) + 30))
  until [ "$($run_as_root runc state "$id" | jq -r .status)" = stopped ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "still running 30s after SIGTERM"
    sleep 0.2
  done
}
check "federation-apiserver: serves HTTPS and kubectl from its image, as $uid" apiserver_serves

jq -r '.[] | "\(.reference)  \(.digest)  \(.compressedSize) bytes"' "$out/images.json"
echo "images: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
