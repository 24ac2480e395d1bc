#!/usr/bin/env python3
"""Fails when code outside src/deck/ compares a deck choice with a word.

The deck's choices (precision, fsdp strategy, init kind, ...) reach the rest
of ftrain as enum values (src/deck/choices.hpp); the words belong to the deck
parser and the run header. A comparison such as `config.precision == "fp8"`
or `deck::word(c.precision) == "fp8"` outside src/deck/ brings the words back
and splits one decision over two places.

The choice fields are read from src/deck/config.hpp (every member whose type
is a deck:: enum), so a new choice is covered without editing this script.

Usage: deck_choices_are_enums.py SOURCE_ROOT   (exit 1 and the places found)
"""
import pathlib
import re
import sys

SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh", ".cc"}


def choice_paths(config_header: str):
    """Member paths of the deck choices: "precision", "init.kind", "images.source"."""
    structs, current = {}, None
    for line in config_header.splitlines():
        start = re.match(r"\s*struct (\w+)\s*\{", line)
        if start:
            current = structs.setdefault(start.group(1), [])
            continue
        if current is None:
            continue
        field = re.match(r"\s*(?:std::optional<)?([\w:]+)>?\s+(\w+)\s*(?:=|;|\{)", line)
        if field:
            current.append((field.group(1), field.group(2)))
    paths = set()
    for fields in structs.values():
        for type_name, name in fields:
            if type_name.startswith("deck::"):
                paths.add(name)  # the struct's own member, reached as .name
    # Qualify the members of sections by the member names that hold them, so
    # a generic name (kind, source, format) is only matched where it is the deck's.
    holder = {}
    for fields in structs.values():
        for type_name, name in fields:
            if type_name in structs:
                holder.setdefault(type_name, []).append(name)
    qualified = set()
    for struct, fields in structs.items():
        for type_name, name in fields:
            if not type_name.startswith("deck::"):
                continue
            if struct == "RunConfig":
                qualified.add(name)
            for member in holder.get(struct, []):
                qualified.add(member + r"\s*\.\s*" + name)
    return sorted(qualified)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    header = (root / "src/deck/config.hpp").read_text()
    paths = choice_paths(header)
    if not paths:
        print(f"{root}/src/deck/config.hpp: no deck:: choice fields found; the script no longer reads it right")
        return 1
    field = "(?:" + "|".join(paths) + r")\b"
    patterns = [
        re.compile(r"(?:\.|->)\s*" + field + r"\s*[!=]=\s*\""),
        re.compile(r"\"\s*[!=]=\s*[\w\[\]().>-]*?(?:\.|->)\s*" + field),
        re.compile(r"\bword\s*\([^()]*\)\s*\)?\s*[!=]=\s*\""),
        re.compile(r"\"\s*[!=]=\s*(?:std::string\s*\(\s*)?(?:deck::)?word\s*\("),
    ]
    found = []
    for top in ("src", "plugins"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            relative = path.relative_to(root).as_posix()
            if relative.startswith("src/deck/"):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                code = line.split("//", 1)[0]
                if any(p.search(code) for p in patterns):
                    found.append(f"{relative}:{number}: {line.strip()}")
    if found:
        print("deck choices compared as words outside src/deck/ (compare the deck:: enum values instead):")
        print("\n".join("  " + f for f in found))
        return 1
    print(f"no deck choice compared as a word ({len(paths)} choice fields from src/deck/config.hpp)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
