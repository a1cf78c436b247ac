#!/usr/bin/env python3
"""Checks that an image's Containerfile says what tools/build-images.sh put in that image.

Reads the Containerfile's final stage (after the last FROM) and the image's config as
`skopeo inspect --config` prints it, and reports every difference: the base, user, environment,
working directory, entrypoint, labels (with the Containerfile's ARGs given --build-arg values,
as `podman build --build-arg` would), the files copied in, and that the build stage compiles
with tools/build-images.sh. Exits 1 on any difference.

    check_containerfile.py CONTAINERFILE NAME CONFIG.json [--build-arg K=V ...]
"""

import argparse
import json
import re
import shlex
import sys


def instructions(text):
    """(KEYWORD, rest) per instruction: continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def key_values(rest, args):
    """KEY=VALUE pairs of an ENV or LABEL line, with $ARG / ${ARG} substituted."""
    pairs = {}
    for word in shlex.split(rest):
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"not KEY=VALUE: {word}")
        pairs[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), value)
    return pairs


def check(containerfile, name, config, build_args):
    instrs = instructions(containerfile)
    froms = [i for i, (k, _) in enumerate(instrs) if k == "FROM"]
    if not froms:
        return ["no FROM"]
    build, final = instrs[: froms[-1]], instrs[froms[-1]:]
    problems = []
    if final[0][1] != "scratch":
        problems.append(f"final stage is FROM {final[0][1]}, not scratch")
    if not any(k == "RUN" and f"tools/build-images.sh --binaries-only {name}" in r for k, r in build):
        problems.append(f"the build stage does not run tools/build-images.sh --binaries-only {name}")

    args, env, labels, user, workdir, entrypoint, copies = {}, [], {}, None, None, None, []
    for keyword, rest in final[1:]:
        if keyword == "ARG":
            key, _, default = rest.partition("=")
            args[key] = build_args.get(key, default)
        elif keyword == "ENV":
            env += [f"{k}={v}" for k, v in key_values(rest, args).items()]
        elif keyword == "LABEL":
            labels.update(key_values(rest, args))
        elif keyword == "USER":
            user = rest
        elif keyword == "WORKDIR":
            workdir = rest
        elif keyword == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif keyword == "COPY":
            copies.append(shlex.split(rest))
        else:
            problems.append(f"unexpected {keyword} in the final stage")

    cfg = config.get("config", {})
    for what, want, got in [
        ("USER", cfg.get("User"), user),
        ("ENV", cfg.get("Env"), env),
        ("WORKDIR", cfg.get("WorkingDir"), workdir),
        ("ENTRYPOINT", cfg.get("Entrypoint"), entrypoint),
        ("LABEL", cfg.get("Labels"), labels),
    ]:
        if want != got:
            problems.append(f"{what}: the Containerfile gives {got!r}, the image has {want!r}")
    # Defaults matter too: a plain `podman build` without --build-arg must label the same.
    for arg, label in [("VERSION", "org.opencontainers.image.version"), ("SOURCE", "org.opencontainers.image.source")]:
        default = next((r.partition("=")[2] for k, r in final if k == "ARG" and r.startswith(arg + "=")), None)
        if default != cfg.get("Labels", {}).get(label):
            problems.append(f"ARG {arg} defaults to {default!r}, the image's {label} is {cfg.get('Labels', {}).get(label)!r}")
    want_copies = [["images/rootfs/", "/"], ["--from=build", f"/{name}", f"/usr/local/bin/{name}"]]
    if copies != want_copies:
        problems.append(f"COPY: the Containerfile copies {copies}, the image is built from {want_copies}")
    return problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("containerfile")
    p.add_argument("name")
    p.add_argument("config")
    p.add_argument("--build-arg", action="append", default=[])
    a = p.parse_args(argv)
    build_args = dict(kv.split("=", 1) for kv in a.build_arg)
    with open(a.containerfile) as f:
        text = f.read()
    with open(a.config) as f:
        config = json.load(f)
    problems = check(text, a.name, config, build_args)
    for problem in problems:
        print(f"{a.containerfile}: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
