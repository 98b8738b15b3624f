#!/usr/bin/env python3
"""The output the README shows for its two commands, written from what
they print (--update) or checked against it (--check, in CI), so that the
README cannot drift from the code.

  tools/readme-output.py --update   runs tools/dev.sh demo, takes the test
                                    summary of the last tools/dev.sh test
                                    (build/meson-logs/testlog.txt), and
                                    writes both into README.md
  tools/readme-output.py --check    the same, compared with README.md: the
                                    lines must match, numbers aside (task
                                    counts, bytes and test counts vary
                                    with the run and the machine), the
                                    OpenCL device's name aside, and a run
                                    of lines alike after that counting as
                                    one (one line per CPU worker)

Each block sits between a line "<!-- output of COMMAND..." and
"<!-- end of output -->" in README.md, as a fenced block.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
TESTLOG = os.path.join(ROOT, "build", "meson-logs", "testlog.txt")
SUMMARY_KEYS = ("Ok:", "Expected Fail:", "Fail:", "Unexpected Pass:", "Skipped:", "Timeout:")


def demo_output():
    r = subprocess.run(["bash", "tools/dev.sh", "demo"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("readme-output: tools/dev.sh demo failed (%d):\n%s%s"
                 % (r.returncode, r.stdout, r.stderr))
    return r.stdout.rstrip("\n").split("\n")


def test_summary():
    try:
        with open(TESTLOG) as f:
            lines = f.read().rstrip("\n").split("\n")
    except OSError:
        sys.exit("readme-output: no %s: run tools/dev.sh test first" % TESTLOG)
    keep = [l.rstrip() for l in lines if l.startswith(SUMMARY_KEYS)]
    if len(keep) < len(SUMMARY_KEYS):
        sys.exit("readme-output: %s has no test summary" % TESTLOG)
    return keep[-len(SUMMARY_KEYS):]


def blocks(text):
    """(start, end) line indices of each fenced block's contents, in order."""
    lines = text.split("\n")
    found = []
    for i, l in enumerate(lines):
        if l.startswith("<!-- output of "):
            if i + 1 >= len(lines) or lines[i + 1] != "```":
                sys.exit("readme-output: README.md line %d: no ``` after the marker" % (i + 2))
            j = i + 2
            while j < len(lines) and lines[j] != "```":
                j += 1
            if j + 1 >= len(lines) or lines[j + 1] != "<!-- end of output -->":
                sys.exit("readme-output: README.md line %d: no end marker" % (j + 2))
            found.append((i + 2, j))
    return lines, found


def normal(lines):
    """Numbers and the stand-in device's name masked, runs of lines that are
    then alike made one, spaces squeezed."""
    device = None
    for l in lines:
        m = re.search(r"the OpenCL CPU device (.*) stands in", l)
        if m:
            device = m.group(1)
    out = []
    for l in lines:
        if device:
            l = l.replace(device, "<device>")
        l = re.sub(r"\d+(\.\d+)?", "#", l)
        l = re.sub(r"\s+", " ", l).strip()
        if not out or out[-1] != l:
            out.append(l)
    return out


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("--update", "--check"):
        sys.exit(__doc__)
    with open(README) as f:
        text = f.read()
    lines, found = blocks(text)
    if len(found) != 2:
        sys.exit("readme-output: README.md has %d output blocks, not 2" % len(found))
    now = [demo_output(), test_summary()]
    if sys.argv[1] == "--update":
        for (a, b), new in reversed(list(zip(found, now))):
            lines[a:b] = new
        with open(README, "w") as f:
            f.write("\n".join(lines))
        print("readme-output: README.md written")
        return
    failed = False
    for (a, b), new, name in zip(found, now, ("tools/dev.sh demo", "tools/dev.sh test")):
        shown, printed = normal(lines[a:b]), normal(new)
        if shown != printed:
            failed = True
            print("readme-output: README.md shows for %s:" % name)
            print("\n".join("  " + l for l in lines[a:b]))
            print("but it prints:")
            print("\n".join("  " + l for l in new))
    if failed:
        sys.exit("readme-output: update README.md (tools/readme-output.py --update)")
    print("readme-output: the README's output matches the commands'")


if __name__ == "__main__":
    main()
