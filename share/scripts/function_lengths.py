#!/usr/bin/env python3
"""The longest C++ functions per folder.

    function_lengths.py [--top N] [--max LINES] DIR...

Lists, for each DIR (searched recursively for .cpp/.hpp/.cu/.cuh files), its
N longest function bodies as "LINES  FILE:LINE  NAME". A function's length
runs from the first line of its signature to its closing brace; lambdas and
local classes count towards the function that holds them. With --max, exits
1 when any function is LINES long or longer, naming each.

The parser is a brace matcher, not a compiler: comments, string and
character literals are blanked first, then every brace block at namespace or
class scope whose header ends in a parameter list (with qualifiers, a
trailing return type or a constructor's initialiser list after it) is a
function.
"""
import argparse
import pathlib
import re
import sys

SUFFIXES = {".cpp", ".hpp", ".cc", ".h", ".cu", ".cuh"}
SCOPE_KEYWORDS = re.compile(r"^(?:template\s*<.*>\s*)?(?:(?:inline\s+)?namespace\b|extern\s*$|class\b|struct\b|union\b)")
NON_FUNCTION = re.compile(r"^(?:template\s*<.*>\s*)?(?:enum\b)|=\s*$|\b(?:return|=)\b")


def blank_literals(text):
    """Comments, strings and character literals replaced by spaces; newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i + 2)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(c)  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_preprocessor(text):
    return re.sub(r"(?m)^[ \t]*#.*(?:\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def function_name(header):
    depth = 0
    for i, c in enumerate(header):
        if c == "(" and depth == 0:
            m = re.search(r"([~\w:<>]+|operator\s*\S+)\s*$", header[:i])
            return m.group(1) if m else "?"
        if c == "<":
            depth += 1
        elif c == ">" and depth > 0:
            depth -= 1
    return "?"


def functions(path):
    """(first line, last line, name) of every function defined in the file."""
    text = strip_preprocessor(blank_literals(path.read_text(errors="replace")))
    found = []
    header_start = 0  # where the text before the next brace begins
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ";}":
            header_start = i + 1
        elif c == "{":
            header = text[header_start:i].strip()
            is_scope = bool(SCOPE_KEYWORDS.match(header)) and not header.endswith(")")
            if is_scope:
                header_start = i + 1
                i += 1
                continue
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            is_function = ")" in header and not NON_FUNCTION.search(header.split("(")[0])
            if is_function:
                offset = header_start + (len(text[header_start:i]) - len(text[header_start:i].lstrip()))
                first = text.count("\n", 0, offset) + 1
                last = text.count("\n", 0, j - 1) + 1
                found.append((first, last, function_name(header)))
            header_start = j
            i = j
            continue
        i += 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=5, help="functions listed per folder (default 5)")
    parser.add_argument("--max", type=int, default=0, help="fail when a function is this many lines or longer")
    args = parser.parse_args()
    too_long = []
    for root in args.dirs:
        if not root.is_dir():
            sys.exit(f"function_lengths.py: {root} is not a directory")
        by_folder = {}
        for path in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES):
            for first, last, name in functions(path):
                by_folder.setdefault(path.parent, []).append((last - first + 1, f"{path}:{first}", name))
        for folder, rows in sorted(by_folder.items()):
            rows.sort(key=lambda r: -r[0])
            print(f"{folder}:")
            for length, where, name in rows[: args.top]:
                print(f"  {length:5d}  {where}  {name}")
            if args.max:
                too_long += [r for r in rows if r[0] >= args.max]
    if too_long:
        print(f"\n{len(too_long)} function(s) of {args.max} lines or more (split them):", file=sys.stderr)
        for length, where, name in too_long:
            print(f"  {length:5d}  {where}  {name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
