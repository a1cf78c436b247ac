#!/usr/bin/env python3
"""Writes Meridian's container images as an OCI image layout and as OCI archives.

Each image is two layers on an empty base: a base layer shared by every image (CA
certificates, /etc/passwd and /etc/group from images/rootfs) and the binary at
/usr/local/bin/<name>. Everything that could differ between two builds of the same commit
is fixed here: entries are sorted, owned by 0:0 with normalised modes and the mtime of
--created, gzip headers carry no name or time, and JSON is written with sorted keys and no
whitespace. So the digests depend only on the files' bytes and the given metadata.

Standard library only, so that it runs wherever python3 does (tools/build-images.sh).
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"

# The user every image runs as: distroless' "nonroot", so a Pod's runAsNonRoot holds and a
# numeric runAsUser matches what the image says.
USER = "65532:65532"
# Docker sets this PATH on images that name none; naming it keeps the Containerfile's images
# and these the same.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CA_FILE = "/etc/ssl/certs/ca-certificates.crt"


def canonical_json(value):
    """Bytes of `value` as JSON with sorted keys and no whitespace: one text per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Layer:
    """A layer's files, written as a reproducible tar."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}  # path (no leading slash) -> (mode, bytes or None for a directory)

    def add_dir(self, path, mode=0o755):
        self.entries[path.strip("/")] = (mode, None)

    def add_file(self, path, data, mode):
        path = path.strip("/")
        parts = path.split("/")
        # Every parent gets its own entry, so unpackers never invent one with their own mode.
        for i in range(1, len(parts)):
            self.entries.setdefault("/".join(parts[:i]), (0o755, None))
        self.entries[path] = (mode, data)

    def tar(self):
        buf = io.BytesIO()
        # USTAR: no PAX records, so no atime/ctime or other host facts can slip in.
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for path in sorted(self.entries):
                mode, data = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mode = mode
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = self.mtime
                if data is None:
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def base_layer(rootfs, mtime):
    """The layer every image shares, from the files under `rootfs` (modes normalised)."""
    layer = Layer(mtime)
    for dirpath, dirnames, filenames in os.walk(rootfs):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, rootfs)
        if rel_dir != ".":
            layer.add_dir(rel_dir)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                sys.exit(f"oci_layout: {full}: only regular files belong in the base layer")
            with open(full, "rb") as f:
                data = f.read()
            # The checkout's umask must not reach the image: only the executable bit counts.
            mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
            layer.add_file(os.path.relpath(full, rootfs), data, mode)
    return layer


class Layout:
    """An OCI image layout directory being written (blobs are content-addressed)."""

    def __init__(self, path):
        self.path = path
        if os.path.exists(path):
            shutil.rmtree(path)  # no stale blobs from an earlier build
        os.makedirs(os.path.join(path, "blobs", "sha256"))
        self.index = []

    def blob(self, data, media_type):
        digest = sha256(data)
        path = os.path.join(self.path, "blobs", "sha256", digest.split(":", 1)[1])
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def close(self):
        index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": self.index}
        with open(os.path.join(self.path, "index.json"), "wb") as f:
            f.write(canonical_json(index))
        with open(os.path.join(self.path, "oci-layout"), "wb") as f:
            f.write(canonical_json({"imageLayoutVersion": "1.0.0"}))


def rfc3339(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_blobs(name, binary, base, args):
    """The (media type, bytes) of every blob of one image, and its manifest bytes last."""
    with open(binary, "rb") as f:
        app = Layer(args.created)
        app.add_file(f"usr/local/bin/{name}", f.read(), 0o755)
    layers = [base.tar(), app.tar()]
    # mtime=0 and no file name: the gzip header then holds nothing from the host. Level 6
    # (zlib's default): level 9 costs two and a half times the CPU for 0.6% less.
    compressed = [gzip.compress(t, compresslevel=6, mtime=0) for t in layers]
    created = rfc3339(args.created)
    labels = dict(args.label)
    labels["org.opencontainers.image.title"] = name
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": USER,
            "Env": [f"PATH={PATH}", f"SSL_CERT_FILE={CA_FILE}"],
            "Entrypoint": [f"/usr/local/bin/{name}"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [sha256(t) for t in layers]},
        "history": [
            {"created": created, "created_by": "COPY images/rootfs/ / # CA certificates, passwd, group"},
            {"created": created, "created_by": f"COPY {name} /usr/local/bin/{name}"},
        ],
    }
    blobs = [(MEDIA_LAYER, c) for c in compressed]
    config_bytes = canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": sha256(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": m, "digest": sha256(b), "size": len(b)} for m, b in blobs],
        "annotations": {
            "org.opencontainers.image.created": created,
            "org.opencontainers.image.base.name": "scratch",
        },
    }
    blobs.append((MEDIA_CONFIG, config_bytes))
    blobs.append((MEDIA_MANIFEST, canonical_json(manifest)))
    return blobs


def archive(path, blobs, ref_annotations, mtime):
    """An OCI archive: the tar of a layout holding one image (what `skopeo copy oci-archive:` reads)."""
    files = {}
    for _, data in blobs:
        files["blobs/sha256/" + hashlib.sha256(data).hexdigest()] = data
    media, manifest = blobs[-1]
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {"mediaType": media, "digest": sha256(manifest), "size": len(manifest), "annotations": ref_annotations}
        ],
    }
    files["index.json"] = canonical_json(index)
    files["oci-layout"] = canonical_json({"imageLayoutVersion": "1.0.0"})
    layer = Layer(mtime)
    for p, data in files.items():
        layer.add_file(p, data, 0o644)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(layer.tar())
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output directory (oci/, <name>.oci.tar, images.json)")
    p.add_argument("--rootfs", required=True, help="the base layer's files (images/rootfs)")
    p.add_argument("--created", required=True, type=int, help="seconds since the epoch (SOURCE_DATE_EPOCH)")
    p.add_argument("--registry", required=True, help="prefix of the image names, e.g. ghcr.io/org")
    p.add_argument("--tag", required=True, help="the images' tag (the workspace version)")
    p.add_argument("--label", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                   help="KEY=VALUE label on every image (repeatable)")
    p.add_argument("image", nargs="+", help="NAME=PATH-OF-STATIC-BINARY")
    args = p.parse_args(argv)
    if any(len(kv) != 2 for kv in args.label):
        p.error("--label takes KEY=VALUE")
    args.image = [tuple(s.split("=", 1)) for s in args.image]
    if any(len(kv) != 2 for kv in args.image):
        p.error("an image is NAME=PATH")
    return args


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    base = base_layer(args.rootfs, args.created)
    layout = Layout(os.path.join(args.out, "oci"))
    summary = []
    for name, binary in sorted(args.image):
        blobs = image_blobs(name, binary, base, args)
        for media, data in blobs[:-1]:
            layout.blob(data, media)
        manifest = layout.blob(blobs[-1][1], blobs[-1][0])
        reference = f"{args.registry}/{name}:{args.tag}"
        # ref.name is what `skopeo copy oci:DIR:REF` and `umoci unpack --image DIR:REF` name;
        # containerd and Docker name an imported image by io.containerd.image.name.
        ref = {"org.opencontainers.image.ref.name": f"{name}:{args.tag}", "io.containerd.image.name": reference}
        layout.index.append(dict(manifest, annotations=ref))
        archive_path = os.path.join(args.out, f"{name}.oci.tar")
        archive(archive_path, blobs, ref, args.created)
        size = sum(len(data) for _, data in blobs)
        summary.append({
            "name": name,
            "reference": reference,
            "ref": ref["org.opencontainers.image.ref.name"],
            "digest": manifest["digest"],
            # What a registry stores and a node pulls: compressed layers, config and manifest.
            "compressedSize": size,
            "archive": os.path.basename(archive_path),
        })
    layout.close()
    with open(os.path.join(args.out, "images.json"), "wb") as f:
        f.write(json.dumps(summary, indent=2, sort_keys=True).encode() + b"\n")
    width = max(len(s["reference"]) for s in summary)
    print(f"{'IMAGE':<{width}}  {'DIGEST':<71}  COMPRESSED")
    for s in summary:
        print(f"{s['reference']:<{width}}  {s['digest']}  {s['compressedSize'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
