#!/usr/bin/env bash
# Proves that the images do not depend on where they are built: clones the given commit
# (default HEAD) into two differently named directories, builds the images in both at once,
# each from its own empty target dir, and compares the binaries and the image digests.
# Two cold builds: expect it to take a while.
#
#   tools/check-reproducible.sh [COMMIT]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rev="$(git -C "$root" rev-parse "${1:-HEAD}")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

dirs=("$tmp/one/meridian" "$tmp/elsewhere/a-longer-checkout-path")
pids=()
start=$(date +%s)
for i in 0 1; do
  d="${dirs[$i]}"
  git clone --quiet --no-checkout "$root" "$d"
  git -C "$d" checkout --quiet --detach "$rev"
  # Each checkout's own target dir (the default), so nothing is shared but CARGO_HOME's
  # downloaded sources, whose path is remapped too.
  (cd "$d" && env -u CARGO_TARGET_DIR tools/build-images.sh --out "$tmp/out-$i" >"$tmp/build-$i.log" 2>&1) &
  pids+=($!)
done
for i in 0 1; do
  wait "${pids[$i]}" || { echo "the build in ${dirs[$i]} failed:" >&2; tail -20 "$tmp/build-$i.log" >&2; exit 1; }
done
echo "built in both in $(($(date +%s) - start))s"
for i in 0 1; do
  echo "${dirs[$i]}:"
  (cd "${dirs[$i]}/target/x86_64-unknown-linux-musl/image" &&
    sha256sum federation-apiserver fed-scheduler fed-controllers lb-agent fedctl) | tee "$tmp/bins-$i"
  grep -v '^build-images:\|^ *Compiling\|^ *Finished' "$tmp/build-$i.log"
done
if diff "$tmp/bins-0" "$tmp/bins-1" &&
  diff <(jq -r '.[] | "\(.name) \(.digest)"' "$tmp/out-0/images.json") \
    <(jq -r '.[] | "\(.name) \(.digest)"' "$tmp/out-1/images.json"); then
  echo "reproducible: the same binaries and digests from ${dirs[0]} and ${dirs[1]} at $rev"
else
  echo "NOT reproducible: see the differences above" >&2
  exit 1
fi
