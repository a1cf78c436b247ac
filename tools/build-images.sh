#!/usr/bin/env bash
# Builds Meridian's container images without a daemon: static musl binaries (profile `image`)
# packed by tools/oci_layout.py into an OCI layout (DIR/oci) and one OCI archive per image
# (DIR/<name>.oci.tar), with DIR/images.json naming each image's reference, digest and size.
# Reproducible: the same commit gives the same digests, whatever the checkout's path.
#
#   tools/build-images.sh [--out DIR] [--binaries-only] [--extra NAME=PATH]... [IMAGE...]
#
#   --out DIR         where the images go (default: target/images)
#   --binaries-only   only compile the static binaries and print their paths (the
#                     build stage of images/Containerfile runs this)
#   --extra NAME=PATH also pack the static binary PATH as image NAME, on the same base
#                     (e.g. kubectl=/usr/bin/kubectl for the chart's `helm test` pod when
#                     no registry is reachable)
#   IMAGE             federation-apiserver fed-scheduler fed-controllers lb-agent fedctl
#                     (default: all); the five binaries are compiled either way, so
#                     every caller shares one build
#
# Environment: MERIDIAN_IMAGE_REGISTRY (name prefix, default ghcr.io/meridian-dev),
# MERIDIAN_IMAGE_TAG (default: the workspace version), MERIDIAN_IMAGE_SOURCE (the source
# label), MERIDIAN_IMAGE_REVISION (default: git HEAD), SOURCE_DATE_EPOCH (default: HEAD's
# commit time), CARGO_TARGET_DIR.
#
# Installs what it lacks: the Rust musl target (rustup) and musl-gcc (Debian musl-tools) for
# the C in ring and mimalloc.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

all_images=(federation-apiserver fed-scheduler fed-controllers lb-agent fedctl)
target=x86_64-unknown-linux-musl
out="$root/target/images"
binaries_only=0
images=()
extras=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    --binaries-only) binaries_only=1; shift ;;
    --extra)
      [[ "${2:-}" == ?*=?* ]] || { echo "build-images: --extra takes NAME=PATH" >&2; exit 2; }
      [ -f "${2#*=}" ] || { echo "build-images: --extra ${2%%=*}: no file ${2#*=}" >&2; exit 2; }
      extras+=("${2%%=*}=$(cd "$(dirname "${2#*=}")" && pwd)/$(basename "${2#*=}")"); shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build-images: unknown flag $1" >&2; exit 2 ;;
    *)
      [[ " ${all_images[*]} " == *" $1 "* ]] || { echo "build-images: no image $1 (images: ${all_images[*]})" >&2; exit 2; }
      images+=("$1"); shift ;;
  esac
done
[ ${#images[@]} -gt 0 ] || images=("${all_images[@]}")

log() { echo "build-images: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else log "need root or sudo to run: $*"; exit 1
  fi
}

# --- tools -------------------------------------------------------------------------------
libdir="$(rustc --print target-libdir --target "$target" 2>/dev/null || true)"
if [ -z "$libdir" ] || [ ! -d "$libdir" ]; then
  command -v rustup >/dev/null || { log "the $target standard library is missing and there is no rustup to add it"; exit 1; }
  log "adding the Rust target $target"
  rustup target add "$target" >&2
fi
if ! command -v musl-gcc >/dev/null; then
  command -v apt-get >/dev/null || { log "musl-gcc is missing: install musl-tools (or your system's musl C toolchain)"; exit 1; }
  log "installing musl-tools (musl-gcc) with apt-get"
  as_root apt-get install -y musl-tools >&2 || { as_root apt-get update >&2 && as_root apt-get install -y musl-tools >&2; }
fi

# --- compile -----------------------------------------------------------------------------
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$target_dir"
target_dir="$(cd "$target_dir" && pwd)"
# Paths in panic messages and C asserts would otherwise embed the checkout, the target dir and
# CARGO_HOME: rewrite them so the binaries do not depend on where they were built. The last
# matching prefix wins, so the target dir (possibly inside the checkout) comes after it.
remaps=("$cargo_home=/cargo" "$root=/meridian" "$target_dir=/target")
rustflags=()
cflags=""
for r in "${remaps[@]}"; do
  rustflags+=("--remap-path-prefix=$r")
  cflags+=" -ffile-prefix-map=$r"
done
# CARGO_ENCODED_RUSTFLAGS keeps paths with spaces whole. Without --target's host/target
# split these flags would reach build scripts too; with it they only reach the binaries.
CARGO_ENCODED_RUSTFLAGS="$(IFS=$'\x1f'; echo "${rustflags[*]}")"
export CARGO_ENCODED_RUSTFLAGS
export CFLAGS_x86_64_unknown_linux_musl="${cflags# }"
export CC_x86_64_unknown_linux_musl=musl-gcc

# A cargo started from a test (cargo test, nextest) inherits the test's CARGO_PKG_*,
# CARGO_MANIFEST_* and such. ring's build script reruns when one of them changes, so the
# build would differ from a plain run's and rebuild ring and everything above it (minutes).
# Cargo sets what each build script needs itself. tools/test.sh's clippy wrapper goes too: the
# images are compiled by plain rustc, the same whether or not a test started the build.
for v in $(compgen -e); do
  case "$v" in
    CARGO_PKG_*|CARGO_MANIFEST_*|CARGO_CFG_*|CARGO_CRATE_NAME|CARGO_BIN_NAME|CARGO_PRIMARY_PACKAGE|OUT_DIR) unset "$v" ;;
    RUSTC_WORKSPACE_WRAPPER|CLIPPY_ARGS) unset "$v" ;;
  esac
done
# Always all five binaries, whichever images were asked for: cargo unifies features over the
# packages a build selects, so a subset would compile the shared dependencies again (minutes)
# instead of reusing the full build's.
bin_args=()
for i in "${all_images[@]}"; do bin_args+=(--bin "$i"); done
log "compiling ${all_images[*]} (profile image, $target)"
start=$(date +%s)
cargo build --locked --profile image --target "$target" "${bin_args[@]}" >&2
log "compiled in $(( $(date +%s) - start ))s"
bindir="$target_dir/$target/image"

if [ "$binaries_only" = 1 ]; then
  for i in "${images[@]}"; do echo "$bindir/$i"; done
  exit 0
fi

# --- pack ----------------------------------------------------------------------------------
command -v python3 >/dev/null || { log "python3 is needed to write the OCI layout"; exit 1; }
version="${MERIDIAN_IMAGE_TAG:-$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)}"
[ -n "$version" ] || { log "no version in Cargo.toml [workspace.package]"; exit 1; }
revision="${MERIDIAN_IMAGE_REVISION:-}"
epoch="${SOURCE_DATE_EPOCH:-}"
if [ -z "$revision" ] || [ -z "$epoch" ]; then
  git rev-parse --git-dir >/dev/null 2>&1 || { log "not a git checkout: set MERIDIAN_IMAGE_REVISION and SOURCE_DATE_EPOCH"; exit 1; }
  [ -n "$revision" ] || revision="$(git rev-parse HEAD)"
  [ -n "$epoch" ] || epoch="$(git log -1 --format=%ct HEAD)"
  if [ -z "${MERIDIAN_IMAGE_REVISION:-}" ] && ! git diff --quiet HEAD -- 2>/dev/null; then
    # Say so in the label: the image is not what that commit alone builds.
    revision="$revision-dirty"
    log "warning: the checkout has uncommitted changes; revision label $revision"
  fi
fi
registry="${MERIDIAN_IMAGE_REGISTRY:-ghcr.io/meridian-dev}"
source_url="${MERIDIAN_IMAGE_SOURCE:-https://github.com/meridian-dev/meridian}"

pack_args=()
for i in "${images[@]}"; do pack_args+=("$i=$bindir/$i"); done
pack_args+=(${extras[@]+"${extras[@]}"})
python3 "$root/tools/oci_layout.py" \
  --out "$out" --rootfs "$root/images/rootfs" --created "$epoch" \
  --registry "$registry" --tag "$version" \
  --label "org.opencontainers.image.source=$source_url" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  "${pack_args[@]}"
log "OCI layout $out/oci, archives $out/<name>.oci.tar, summary $out/images.json"
