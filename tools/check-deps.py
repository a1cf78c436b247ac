#!/usr/bin/env python3
"""Offline dependency audit: licenses, sources, banned crates and workspace dependencies.

Reads `cargo metadata` (the lock file as it is; no network beyond what cargo already fetched)
and the members' Cargo.toml files, and fails with one line per finding:

- licenses: every package's SPDX expression must be satisfiable with the licenses in
  tools/deps-policy.toml's `allow` list (an OR needs one allowed side, an AND both);
- sources: every package comes from crates.io or from this workspace (no git, no other
  registry);
- bans: crates the project keeps out (a second TLS stack, the deprecated YAML crate, ...);
- workspace dependencies: a member names each external crate through
  `[workspace.dependencies]` (`foo.workspace = true`), so one version is chosen in one place.

    tools/check-deps.py            (from anywhere in the checkout)
"""

import json
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def tokenize(expression):
    """SPDX tokens; the older `/` separator some crates still use means OR."""
    spaced = expression.replace("(", " ( ").replace(")", " ) ").replace("/", " OR ")
    return spaced.split()


def satisfiable(expression, allowed):
    """Whether an SPDX license expression can be met using only `allowed` licenses.

    Grammar (SPDX 2.3 annex D, without `+`): or := and (OR and)*; and := atom (AND atom)*;
    atom := '(' or ')' | id [WITH exception]. A `WITH` exception only ever adds permissions,
    so `X WITH E` is allowed when X is."""
    tokens = tokenize(expression)
    position = 0

    def peek():
        return tokens[position] if position < len(tokens) else None

    def take():
        nonlocal position
        position += 1
        return tokens[position - 1]

    def parse_or():
        ok = parse_and()
        while peek() == "OR":
            take()
            ok = parse_and() or ok
        return ok

    def parse_and():
        ok = parse_atom()
        while peek() == "AND":
            take()
            ok = parse_atom() and ok
        return ok

    def parse_atom():
        token = take() if peek() is not None else None
        if token == "(":
            ok = parse_or()
            if take() != ")":
                raise ValueError(f"unbalanced parentheses in {expression!r}")
            return ok
        if token is None or token in ("AND", "OR", "WITH", ")"):
            raise ValueError(f"malformed license expression {expression!r}")
        if peek() == "WITH":
            take()
            take()
        return token in allowed

    result = parse_or()
    if position != len(tokens):
        raise ValueError(f"trailing tokens in license expression {expression!r}")
    return result


def workspace_findings(metadata):
    """Members' external dependencies not taken from [workspace.dependencies]."""
    findings = []
    members = set(metadata["workspace_members"])
    for package in metadata["packages"]:
        if package["id"] not in members:
            continue
        manifest = pathlib.Path(package["manifest_path"])
        data = tomllib.loads(manifest.read_text())
        tables = [("dependencies", data.get("dependencies", {})),
                  ("dev-dependencies", data.get("dev-dependencies", {})),
                  ("build-dependencies", data.get("build-dependencies", {}))]
        for target, table in data.get("target", {}).items():
            for kind in ("dependencies", "dev-dependencies", "build-dependencies"):
                tables.append((f"target.{target}.{kind}", table.get(kind, {})))
        for kind, table in tables:
            for name, spec in table.items():
                if isinstance(spec, dict) and spec.get("workspace") is True:
                    continue
                where = manifest.relative_to(ROOT)
                findings.append(f"workspace: {where} [{kind}] {name} is not "
                                "`workspace = true` (declare it in the root Cargo.toml)")
    return findings


def main():
    policy = tomllib.loads((ROOT / "tools" / "deps-policy.toml").read_text())
    allowed = set(policy["licenses"]["allow"])
    banned = policy["bans"]
    output = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    metadata = json.loads(output)
    members = set(metadata["workspace_members"])
    findings = []
    for package in sorted(metadata["packages"], key=lambda p: (p["name"], p["version"])):
        label = f"{package['name']} {package['version']}"
        if package["id"] in members:
            continue
        source = package["source"]
        if source != CRATES_IO:
            findings.append(f"sources: {label} comes from {source}, not crates.io")
        expression = package.get("license")
        if not expression:
            findings.append(f"licenses: {label} declares no SPDX license expression")
        else:
            try:
                if not satisfiable(expression, allowed):
                    findings.append(f"licenses: {label} is {expression!r}, not allowed by "
                                    "tools/deps-policy.toml")
            except ValueError as error:
                findings.append(f"licenses: {label}: {error}")
        reason = banned.get(package["name"])
        if reason is not None:
            findings.append(f"bans: {label}: {reason}")
    findings += workspace_findings(metadata)
    external = len(metadata["packages"]) - len(members)
    for finding in findings:
        print(finding)
    if findings:
        print(f"check-deps: {len(findings)} finding(s) over {external} crates", file=sys.stderr)
        return 1
    print(f"check-deps: {external} crates: licenses, sources, bans and workspace dependencies ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        allow = {"MIT", "Apache-2.0", "ISC"}
        cases = [("MIT OR Apache-2.0", True), ("MIT/Apache-2.0", True),
                 ("GPL-3.0 OR MIT", True), ("GPL-3.0", False), ("Apache-2.0 AND ISC", True),
                 ("Apache-2.0 AND GPL-3.0", False), ("(MIT OR GPL-3.0) AND ISC", True),
                 ("(GPL-3.0 OR LGPL-2.1) AND MIT", False),
                 ("Apache-2.0 WITH LLVM-exception OR GPL-3.0", True)]
        bad = [(e, w) for e, w in cases if satisfiable(e, allow) != w]
        for expression, want in bad:
            print(f"self-test: {expression!r} should be {want}")
        sys.exit(1 if bad else 0)
    sys.exit(main())
