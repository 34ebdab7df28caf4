#!/usr/bin/env python3
"""Check that every command README.md and BENCHMARKS.md write still runs.

Each `mballoc ...` command (also as `cargo run ... -p mballoc-cli -- ...`
or `target/release/mballoc ...`) in a code block or an inline code span is
run with MBALLOC_PARSE_ONLY=1: the binary parses and checks its arguments
(scenario names, settings, sweeps) and exits without running anything.
`scripts/...` commands must exist and pass `bash -n`; `cargo test --test
NAME` and `cargo bench --bench NAME` must name a target that exists.
`cargo run ... --example NAME -- ...` is checked the same way by the
example's own binary (`examples/NAME` beside `mballoc`), which must have
been built. Synopses (with `[...]`, `|` between choices, or capitalised placeholders
such as FILE) are not commands and are passed over, as is an inline span
that only names a command in passing (`mballoc mount`, short of the
arguments it needs).

Usage: scripts/check-doc-commands.py PATH/TO/mballoc [FILE.md ...]
"""

import glob
import os
import re
import shlex
import subprocess
import sys

PLACEHOLDER = re.compile(r"\b(?:[A-Z][A-Z0-9_]{1,}|N)(?:\.\.\.)?\b")


def spans(text):
    """Code blocks (line by line, continuations joined) and inline spans."""
    out = []
    in_block = False
    skipping = False
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("```"):
            # A block that says it is text (a picture, output) holds no
            # commands.
            if in_block or skipping:
                in_block = skipping = False
            elif line.strip()[3:].strip() == "text":
                skipping = True
            else:
                in_block = True
            continue
        if skipping:
            continue
        if in_block:
            pending += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
            if not line.rstrip().endswith("\\"):
                out.append((pending.strip(), "block"))
                pending = ""
    without_blocks = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"`([^`]+)`", without_blocks):
        out.append((" ".join(m.group(1).split()), "inline"))
    return out


def commands(span):
    """The commands in one span: split at shell separators, comments cut."""
    span = span.split(" #")[0]
    for part in re.split(r"&&|;|\||\bdo\b|\bdone\b|\$\(", span):
        part = part.strip()
        part = re.split(r"\s[12]?>", part)[0].strip()
        if part:
            yield part


def mballoc_args(cmd):
    for pat in (r"^cargo run .*-p mballoc-cli -- (.*)$", r"^(?:\S*/)?mballoc (.*)$"):
        m = re.match(pat, cmd)
        if m:
            return m.group(1)
    return None


def synopsis(args):
    return "[" in args or "|" in args or PLACEHOLDER.search(args) is not None


def main():
    binary = sys.argv[1]
    files = sys.argv[2:] or ["README.md", "BENCHMARKS.md"]
    env = dict(os.environ, MBALLOC_PARSE_ONLY="1")
    failed, checked = [], 0
    seen = set()
    for f in files:
        for span, where in spans(open(f, encoding="utf-8").read()):
            for cmd in commands(span):
                if cmd in seen:
                    continue
                seen.add(cmd)
                args = mballoc_args(cmd)
                if args is not None:
                    if synopsis(args) or not args:
                        continue
                    try:
                        argv = shlex.split(args)
                    except ValueError:
                        continue
                    program = binary
                    example = re.search(r"--example (\S+)", cmd)
                    if cmd.startswith("cargo ") and example:
                        program = os.path.join(os.path.dirname(binary), "examples", example.group(1))
                        if not os.path.isfile(program):
                            failed.append(f"{f}: `{cmd}`: {program} is not built")
                            continue
                    r = subprocess.run([program] + argv, env=env, capture_output=True, text=True)
                    # Prose names a command in passing (`mballoc mount`):
                    # not a command line unless it says more.
                    if where == "inline" and ("required arguments were not provided" in r.stderr or "Usage:" in r.stderr and len(cmd.split()) <= 3):
                        continue
                    checked += 1
                    if r.returncode != 0:
                        failed.append(f"{f}: `{cmd}`: {(r.stderr or r.stdout).strip().splitlines()[:1]}")
                    continue
                m = re.match(r"^(scripts/\S+)", cmd)
                if m:
                    checked += 1
                    path = m.group(1)
                    if not os.path.isfile(path):
                        failed.append(f"{f}: `{cmd}`: {path} does not exist")
                    elif path.endswith(".sh") and subprocess.run(["bash", "-n", path]).returncode != 0:
                        failed.append(f"{f}: `{cmd}`: {path} does not parse")
                    continue
                for kind, where in (("--test", "tests"), ("--bench", "benches")):
                    m = re.search(kind + r" (\S+)", cmd)
                    if cmd.startswith("cargo ") and m and not synopsis(m.group(1)):
                        checked += 1
                        if not glob.glob(f"crates/*/{where}/{m.group(1)}.rs"):
                            failed.append(f"{f}: `{cmd}`: no {where[:-1]} target {m.group(1)}")
    for line in failed:
        print(line)
    print(f"doc commands: {checked} checked, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
