#!/usr/bin/env python3
"""Checks that Tandem's layers hold (docs/ARCHITECTURE.md).

  check-layers.py ROOT              checks the tree at ROOT; exit 1 on a breach
  check-layers.py --self-test ROOT  plants each kind of breach in a copy of
                                    the tree and checks that it is caught

What it checks:
  - includes: a file under runtime/LAYER/ includes its own folder's
    headers, the layers below it, runtime/objects.h and backends/backend.h;
    runtime/objects.h includes only the headers whose types its objects
    embed; a backend includes no runtime header (backends/driver.h is its
    one way in);
  - calls (tdm_* and tdm__*): a runtime file calls no function defined in
    a layer above its own, nor one defined in a backend (runtime/objects.h
    calls only the support layer); a backend calls only what
    backends/driver.h declares, the support layer, and its own functions;
  - a client library (runtime/mpi/) uses the public API only: it includes
    no runtime header and calls no internal (tdm__*) function;
  - docs: every .c and .h under runtime/ and backends/ is named in the row
    of its folder in docs/ARCHITECTURE.md's layer table.
"""
import os
import re
import shutil
import sys
import tempfile

RANKS = {"support": 1, "platform": 2, "data": 3, "sched": 4, "core": 5}
# The headers runtime/objects.h may include: what its objects embed.
OBJECT_TYPES = {
    "runtime/support/support.h",
    "runtime/platform/platform.h",
    "runtime/data/coherence.h",
    "runtime/sched/policy.h",
    "runtime/core/trace.h",
    "backends/backend.h",
}
# Reach inside for tests and tools only; never included by the runtime.
UMBRELLA = "runtime/internal.h"
# Libraries built on the public API, as an application would use it.
CLIENTS = {"mpi"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CALL = re.compile(r"\b(tdm_\w+)\s*\(")
DEF = re.compile(r"^(?:static\s+inline\s+|static\s+TDM_ALWAYS_INLINE\s+)?"
                 r"[A-Za-z_][\w \*]*?\b(tdm_\w+)\s*\(([^;{]*?)\)\s*(?:__attribute__\S*\s*)?\{",
                 re.M | re.S)
STATIC = re.compile(r"^static\b")


def sources(root):
    out = []
    for top in ("runtime", "backends"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def layer_of(path):
    """'support'..'core', 'objects', 'umbrella', or 'backend'."""
    parts = path.split("/")
    if parts[0] == "backends":
        return "backend"
    if path == UMBRELLA:
        return "umbrella"
    if len(parts) == 2:
        return "objects"
    return parts[1]


def resolve(root, src, inc):
    here = os.path.dirname(src)
    for base in (here, "include", "runtime"):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None  # a system or generated header


def check_includes(root, files, errors):
    for src in files:
        layer = layer_of(src)
        if layer == "umbrella":
            continue
        text = open(os.path.join(root, src)).read()
        for inc in INCLUDE.findall(strip_comments_keep_includes(text)):
            dst = resolve(root, src, inc)
            if dst is None or dst.startswith("include/"):
                continue
            why = None
            if layer in CLIENTS:
                why = "a client library includes the public headers only"
            elif layer == "backend":
                if dst.startswith("runtime/") and src != "backends/driver.h":
                    why = "a backend includes only backends/driver.h of the runtime"
            elif layer == "objects":
                if dst not in OBJECT_TYPES:
                    why = "runtime/objects.h includes only the headers its objects embed"
            elif dst == UMBRELLA:
                why = "runtime/internal.h is for tests and tools"
            elif dst.startswith("backends/"):
                if dst != "backends/backend.h":
                    why = "the runtime reaches backends only through their tables"
            else:
                dl = layer_of(dst)
                if dl in RANKS and RANKS[dl] > RANKS[layer]:
                    why = "includes %s, a layer above %s" % (dl, layer)
            if why:
                errors.append("%s: #include \"%s\": %s" % (src, inc, why))


def strip_comments_keep_includes(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def definitions(root, files):
    """name -> the file that defines it (functions and inline functions)."""
    defs = {}
    for src in files:
        text = strip_comments(open(os.path.join(root, src)).read())
        for m in DEF.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1:m.end()]
            if STATIC.match(line) and src.endswith(".c"):
                continue  # file-local
            defs.setdefault(m.group(1), src)
    return defs


def declared_in(root, header):
    text = strip_comments(open(os.path.join(root, header)).read())
    return set(CALL.findall(text))


def check_calls(root, files, errors):
    defs = definitions(root, files)
    driver = declared_in(root, "backends/driver.h")
    for src in files:
        layer = layer_of(src)
        if layer == "umbrella":
            continue
        text = strip_comments(open(os.path.join(root, src)).read())
        own = {n for n, f in defs.items() if f == src}
        for name in sorted(set(CALL.findall(text)) - own):
            if layer in CLIENTS and name.startswith("tdm__"):
                errors.append("%s: calls %s: a client library uses the public API only" %
                              (src, name))
                continue
            where = defs.get(name)
            if where is None:
                continue  # a macro's or a test's name
            wl = layer_of(where)
            why = None
            if layer == "backend":
                if wl == "backend":
                    if where.split("/")[1] != src.split("/")[1] and \
                            src != "backends/backends.c" and where.count("/") > 1:
                        why = "calls %s of another backend (%s)" % (name, where)
                elif wl != "support" and wl != "objects" and name not in driver:
                    why = "calls %s (%s), which backends/driver.h does not declare" % (
                        name, where)
            elif wl == "backend":
                why = "calls %s of a backend (%s) by name: through its table" % (name, where)
            elif layer in RANKS and wl in RANKS and RANKS[wl] > RANKS[layer]:
                why = "calls %s (%s), a layer above %s" % (name, where, layer)
            elif layer == "objects" and wl in RANKS and wl != "support":
                why = "calls %s (%s): objects.h only reads objects" % (name, where)
            if why:
                errors.append("%s: %s" % (src, why))


def layer_table(root):
    """folder -> the text of its row in the layer table."""
    rows = {}
    path = os.path.join(root, "docs", "ARCHITECTURE.md")
    for line in open(path):
        m = re.match(r"\|\s*`([\w/]+/)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def check_docs(root, files, errors):
    rows = layer_table(root)
    for src in files:
        folder, name = src.rsplit("/", 1)
        row = rows.get(folder + "/")
        if row is None:
            errors.append("%s: docs/ARCHITECTURE.md's layer table has no row for %s/" %
                          (src, folder))
        elif "`%s`" % name not in row:
            errors.append("%s: not named in the row of %s/ of docs/ARCHITECTURE.md's "
                          "layer table" % (src, folder))


def check(root):
    files = sources(root)
    errors = []
    check_includes(root, files, errors)
    check_calls(root, files, errors)
    check_docs(root, files, errors)
    return errors


def self_test(root):
    """Each planted breach must be reported, and the tree as it is must pass."""
    plants = [
        ("an upward include", "runtime/support/util.c",
         lambda s: s.replace('#include "support.h"', '#include "support.h"\n#include "../core/core.h"'),
         "a layer above support"),
        ("a backend including a runtime header", "backends/sim/sim.c",
         lambda s: s.replace('#include "../driver.h"',
                             '#include "../driver.h"\n#include "../../runtime/data/data.h"'),
         "only backends/driver.h"),
        ("an upward call", "runtime/data/ranges.c",
         lambda s: s + "\nvoid tdm__planted(tdm_runtime *rt);\n"
                       "void tdm__planted(tdm_runtime *rt) { tdm__place(rt, NULL); }\n",
         "a layer above data"),
        ("a backend calling outside the driver header", "backends/sim/sim.c",
         lambda s: s + "\nvoid tdm__planted(tdm_runtime *rt);\n"
                       "void tdm__planted(tdm_runtime *rt) { tdm__sched_stop(rt); }\n",
         "does not declare"),
        ("a client library reaching inside", "runtime/mpi/mpi.c",
         lambda s: s.replace('#include "tandem/mpi.h"',
                             '#include "tandem/mpi.h"\n#include "../core/core.h"'),
         "the public headers only"),
        ("a client library calling inside", "runtime/mpi/mpi.c",
         lambda s: s + "\nvoid tdm_mpi_planted(tdm_runtime *rt);\n"
                       "void tdm_mpi_planted(tdm_runtime *rt) { tdm__place(rt, NULL); }\n",
         "the public API only"),
        ("a file missing from the layer table", "docs/ARCHITECTURE.md",
         lambda s: s.replace("`clock.c`", "the clock"),
         "runtime/support/clock.c: not named"),
    ]
    base = check(root)
    if base:
        print("self-test: the tree itself fails:\n  " + "\n  ".join(base))
        return 1
    failed = 0
    for what, path, plant, expect in plants:
        with tempfile.TemporaryDirectory() as tmp:
            for top in ("runtime", "backends", "docs", "include"):
                shutil.copytree(os.path.join(root, top), os.path.join(tmp, top))
            p = os.path.join(tmp, path)
            before = open(p).read()
            after = plant(before)
            if after == before:
                print("self-test: %s: could not plant it in %s" % (what, path))
                failed += 1
                continue
            open(p, "w").write(after)
            errors = check(tmp)
            caught = [e for e in errors if expect in e]
            print("self-test: %s in %s: %s" % (what, path,
                                                caught[0] if caught else "NOT CAUGHT"))
            if not caught:
                failed += 1
    return 1 if failed else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        return self_test(argv[2])
    if len(argv) != 2:
        print(__doc__)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e)
    if errors:
        print("%d breach%s of the layers (docs/ARCHITECTURE.md)" %
              (len(errors), "" if len(errors) == 1 else "es"))
        return 1
    print("layers hold: %d files" % len(sources(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
