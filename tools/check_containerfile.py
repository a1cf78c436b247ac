#!/usr/bin/env python3
"""Checks that one target of images/Containerfile says what tools/build-images.sh put in that image.

Reads the named target's stage and the stages it is built FROM (back to `scratch`), and the
image's config as `skopeo inspect --config` prints it, and reports every difference: the base,
user, environment, working directory, entrypoint, labels (with the Containerfile's ARGs given
--build-arg values, as `podman build --build-arg` would), the files copied in, and that the stage
the binary is copied from (`build`) compiles it with tools/build-images.sh. Exits 1 on any
difference.

    check_containerfile.py CONTAINERFILE TARGET CONFIG.json [--build-arg K=V ...]
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


def stages(instrs):
    """(base, alias, instructions after FROM) per stage, in the file's order."""
    out = []
    for keyword, rest in instrs:
        if keyword == "FROM":
            words = rest.split()
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            out.append((words[0], alias, []))
        elif out:
            out[-1][2].append((keyword, rest))
    return out


def chain(all_stages, target):
    """The instructions of TARGET's stage and of the stages it is built on, the root first,
    and the root's base image; None when no stage is called TARGET."""
    by_alias = {alias: (base, body) for base, alias, body in all_stages if alias}
    if target not in by_alias:
        return None
    bodies, name = [], target
    while name in by_alias and len(bodies) <= len(by_alias):
        base, body = by_alias[name]
        bodies.insert(0, body)
        name = base
    return name, [instr for body in bodies for instr in body]


def compiles(body, name):
    """Whether a build stage's RUN compiles NAME with tools/build-images.sh (no names: all)."""
    for keyword, rest in body:
        if keyword != "RUN":
            continue
        m = re.search(r"tools/build-images\.sh --binaries-only((?:[ \t]+[\w-]+)*)", rest)
        if m and (not m.group(1).split() or name in m.group(1).split()):
            return True
    return False


def check(containerfile, name, config, build_args):
    all_stages = stages(instructions(containerfile))
    found = chain(all_stages, name)
    if found is None:
        return [f"no stage called {name} (build it with --target {name})"]
    root, final = found
    problems = []
    if root != "scratch":
        problems.append(f"the stage {name} is built on {root}, not scratch")

    args, env, labels, user, workdir, entrypoint, copies = {}, [], {}, None, None, None, []
    for keyword, rest in final:
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
            problems.append(f"unexpected {keyword} in the stage {name} or its base")

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
    want_copies = [["images/rootfs/", "/"], ["--from=build", f"/out/{name}", f"/usr/local/bin/{name}"]]
    if copies != want_copies:
        problems.append(f"COPY: the Containerfile copies {copies}, the image is built from {want_copies}")
    build = next((body for _, alias, body in all_stages if alias == "build"), [])
    if not compiles(build, name):
        problems.append(f"the build stage does not compile {name} with tools/build-images.sh --binaries-only")
    return problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("containerfile")
    p.add_argument("target")
    p.add_argument("config")
    p.add_argument("--build-arg", action="append", default=[])
    a = p.parse_args(argv)
    build_args = dict(kv.split("=", 1) for kv in a.build_arg)
    with open(a.containerfile) as f:
        text = f.read()
    with open(a.config) as f:
        config = json.load(f)
    problems = check(text, a.target, config, build_args)
    for problem in problems:
        print(f"{a.containerfile}: {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
