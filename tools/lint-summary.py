#!/usr/bin/env python3
"""Shows a cargo build's compiler messages and fails if the workspace's code drew any.

tools/test.sh builds the workspace with clippy-driver wrapping rustc for the workspace's own
crates, so the lints come out of the same compile that makes the test binaries. Its lints stay
warnings there, so one finding does not stop the build and the tests still run. This filter
reads cargo's JSON messages (`--message-format=json`), prints each message as cargo would, and
exits 1 when there was a warning or an error, where `cargo clippy -- -D warnings` would have
failed. Dependencies' lints are capped by cargo and never reach it.

    cargo build --message-format=json ... | tools/lint-summary.py
"""

import json
import sys


def main() -> int:
    findings = 0
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            # Not cargo's JSON (a build script's stray output): pass it on as it is.
            sys.stderr.write(line)
            continue
        if message.get("reason") != "compiler-message":
            continue
        diagnostic = message["message"]
        sys.stderr.write(diagnostic.get("rendered") or diagnostic["message"] + "\n")
        if diagnostic["level"] in ("warning", "error"):
            findings += 1
    if findings:
        print(f"lint-summary.py: the workspace's code drew {findings} warning or error messages",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
