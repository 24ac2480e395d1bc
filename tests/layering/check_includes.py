#!/usr/bin/env python3
"""Every #include in src/ against the layer table; plugins against the SDK.

    check_includes.py --repo R [--pretend FILE=PATH ...]

The table (R/cmake/layering.txt) names, per folder of src/, the folders it
builds on. A file of folder F may include F's own headers and those of every
folder F builds on, directly or through others; anything else is a crossing
from a lower layer to a higher one (or between layers that do not know each
other) and fails, naming the file and line. The table itself must be a
layering: no folder may build, even indirectly, on itself.

The plugin SDK is the table's sdk-folder (less host/ and cuda/) and sdk-file
entries, what `cmake --install` ships. An installed header may include only
installed headers (the install would not compile otherwise), and the model
plugins (R/plugins, the SDK example R/share/doc/examples/mlp_plugin) may
include only installed headers.

Listed crossings (table lines `crossing FILE HEADER`) are allowed while
they exist; one that is gone fails, so the list only shrinks.

--pretend FILE=PATH checks the file at FILE as if it were at PATH (relative
to R): the negative controls plant an include this way without touching the
tree. Exit 0 when everything holds, 1 otherwise (every finding listed).
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".hpp", ".h", ".cpp", ".cu", ".cuh", ".c", ".inc")
HEADER_SUFFIXES = (".hpp", ".h", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
PLUGIN_ROOTS = ("plugins", "share/doc/examples/mlp_plugin")


def read_table(path):
    builds_on, sdk_folders, sdk_files, crossings = {}, [], [], []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            words = raw.split("#", 1)[0].split()
            if not words:
                continue
            head, rest = words[0], words[1:]
            if head == "sdk-folder":
                sdk_folders += rest
            elif head == "sdk-file":
                sdk_files += rest
            elif head == "crossing":
                if len(rest) != 2:
                    sys.exit(f"{path}:{number}: a crossing names the including file and the included header")
                crossings.append((rest[0], rest[1], number))
            else:
                if head in builds_on:
                    sys.exit(f"{path}:{number}: folder {head} is listed twice")
                builds_on[head] = rest
    for folder, below in builds_on.items():
        for b in below:
            if b not in builds_on:
                sys.exit(f"{path}: {folder} builds on {b}, which has no line of its own")
    return builds_on, sdk_folders, sdk_files, crossings


def reachable(builds_on):
    """folder -> every folder it builds on, directly or not."""
    closure = {}
    for start in builds_on:
        seen, pending = set(), list(builds_on[start])
        while pending:
            f = pending.pop()
            if f not in seen:
                seen.add(f)
                pending += builds_on[f]
        closure[start] = seen
    return closure


def folder_of(src_relative, folders):
    """The table folder holding a path under src/: the longest that prefixes it."""
    best = None
    for folder in folders:
        if src_relative.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def includes(path):
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def resolve(repo, including_as, included):
    """The repository path an include names, or None (system, generated, third party)."""
    beside = os.path.normpath(os.path.join(os.path.dirname(including_as), included))
    if os.path.isfile(os.path.join(repo, beside)):
        return beside
    in_src = os.path.normpath(os.path.join("src", included))
    if os.path.isfile(os.path.join(repo, in_src)):
        return in_src
    return None


def walk(repo, root):
    for dirpath, dirnames, filenames in os.walk(os.path.join(repo, root)):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                full = os.path.join(dirpath, name)
                yield full, os.path.relpath(full, repo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--pretend", action="append", default=[], metavar="FILE=PATH")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    table_path = "cmake/layering.txt"
    builds_on, sdk_folders, sdk_files, crossings = read_table(os.path.join(repo, table_path))
    closure = reachable(builds_on)
    findings = []
    for folder, below in closure.items():
        if folder in below:
            findings.append(f"{table_path}: {folder} builds on itself (a cycle in the table)")

    # (file on disk, path it is checked as)
    sources = list(walk(repo, "src"))
    plugin_sources = [s for root in PLUGIN_ROOTS for s in walk(repo, root)]
    for spec in args.pretend:
        actual, _, as_path = spec.partition("=")
        (plugin_sources if as_path.startswith(PLUGIN_ROOTS) else sources).append((actual, as_path))

    listed = {(f, h): n for f, h, n in crossings}
    crossings_seen = set()

    def is_sdk(path):
        rel = os.path.relpath(path, "src")
        if rel in sdk_files:
            return True
        parts = rel.split("/")
        return (path.endswith(HEADER_SUFFIXES) and parts[0] in sdk_folders
                and "host" not in parts[1:-1] and "cuda" not in parts[1:-1])

    checked = 0
    for actual, as_path in sources:
        rel = os.path.relpath(as_path, "src")
        folder = folder_of(rel, builds_on)
        if folder is None:
            findings.append(f"{as_path}: folder {rel.split('/')[0]} is not in the layer table {table_path}")
            continue
        for line, included in includes(actual):
            target = resolve(repo, as_path, included)
            if target is None or not target.startswith("src/"):
                continue
            checked += 1
            target_folder = folder_of(os.path.relpath(target, "src"), builds_on)
            if target_folder == folder or target_folder in closure[folder]:
                pass
            elif (as_path, included) in listed:
                crossings_seen.add((as_path, included))
            else:
                allowed = ", ".join(sorted(closure[folder])) or "nothing"
                findings.append(f"{as_path}:{line}: {folder}/ may not include {included} ({target_folder}/ is not "
                                f"below {folder}/; {folder}/ builds on: {allowed})")
            if is_sdk(as_path) and not is_sdk(target):
                findings.append(f"{as_path}:{line}: installed SDK header includes {included}, which the SDK "
                                f"does not install (add it to the sdk lines of {table_path} or drop the include)")
    for (f, h), n in listed.items():
        if (f, h) not in crossings_seen:
            findings.append(f"{table_path}:{n}: the crossing {f} -> {h} is gone: remove its line")

    for actual, as_path in plugin_sources:
        for line, included in includes(actual):
            target = resolve(repo, as_path, included)
            if target is None or not target.startswith("src/"):
                continue
            checked += 1
            if not is_sdk(target):
                findings.append(f"{as_path}:{line}: a plugin includes {included}, which is not in the plugin SDK "
                                f"(only installed headers: sdk lines of {table_path})")

    if findings:
        print(f"FAIL: {len(findings)} include(s) cross the layers:", file=sys.stderr)
        for f in findings:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"ok: {checked} includes of {len(sources)} files in src/ and {len(plugin_sources)} plugin files follow "
          f"the layer table ({len(builds_on)} folders, {len(crossings)} listed crossings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
