#!/usr/bin/env bash
# Replaces the images' CA bundle (images/rootfs/etc/ssl/certs/ca-certificates.crt) with
# Mozilla's roots as the PyPI package certifi VERSION ships them, and records the version in
# images/rootfs/usr/share/doc/ca-certificates/copyright. The images' digests change with it.
#
#   tools/update-ca-certificates.sh VERSION      (e.g. 2026.10.19.post1)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${1:?usage: tools/update-ca-certificates.sh CERTIFI-VERSION}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
  -d "$tmp" "certifi==$version"
python3 - "$tmp" "$root" "$version" <<'PY'
import glob, re, sys, zipfile
tmp, root, version = sys.argv[1:]
(wheel,) = glob.glob(f"{tmp}/certifi-*.whl")
pem = zipfile.ZipFile(wheel).read("certifi/cacert.pem")
if pem.count(b"-----BEGIN CERTIFICATE-----") < 100:
    sys.exit(f"{wheel}: cacert.pem holds too few certificates to be Mozilla's roots")
open(f"{root}/images/rootfs/etc/ssl/certs/ca-certificates.crt", "wb").write(pem)
path = f"{root}/images/rootfs/usr/share/doc/ca-certificates/copyright"
text = open(path).read()
open(path, "w").write(re.sub(r"certifi\s+\S+ \(", f"certifi\n{version} (", text, count=1))
PY
echo "CA bundle from certifi $version: $(grep -c 'BEGIN CERTIFICATE' "$root/images/rootfs/etc/ssl/certs/ca-certificates.crt") certificates"
