#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that splitting a C file moved its functions without changing them.

    tools/move-check.py [--rev REV] OLD NEW... [--rename OLD=NEW]...

OLD is read at git revision REV (default HEAD) and the NEW files from the
working tree (OLD may be among them when it keeps some of its code).  Every
function defined at the top level of OLD must be defined exactly once in
the NEW files, under its old name or the one --rename gives it, with a body
byte-identical to the old one once the renames are applied to the old body
(a rename applies where the old name is called: NAME immediately followed
by "(", so a label of the same name is left alone).  The signature may lose `static` and
change its whitespace, nothing else.  Every other line of OLD (declarations,
types, macros, comments) must occur in the NEW files once the renames are
applied, compared with runs of whitespace made one space; the ones that do
not are listed so a reader sees what changed outside the functions.  NEW
files may define functions OLD did not have: they are listed.  With -w a
body may also differ in the whitespace outside string and character
literals (a call's arguments wrapped again after a rename).

Functions are recognised in the house layout: the signature starts in
column 0, the body opens with "{" alone on a line and ends with "}" alone
on a line.  Exit status 0 when every function matches, 1 otherwise.
"""
import argparse
import difflib
import re
import subprocess
import sys

def functions(text):
    """{name: (signature, body, first line, last line)} of the top-level
    function definitions, and the list of names in order."""
    lines = text.split("\n")
    out, order = {}, []
    i = 0
    while i < len(lines):
        if lines[i] == "{":
            # the signature: the lines above, back to a blank line, a
            # comment's end, a preprocessor line or a line ending in ; or }
            j = i - 1
            while j >= 0 and lines[j] and not lines[j].startswith(("#", "/*", " *", "}")) \
                    and not lines[j].rstrip().endswith((";", "*/", "}")):
                j -= 1
            sig = "\n".join(lines[j + 1:i])
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            body = "\n".join(lines[i:k + 1])
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", sig)
            if not m:
                sys.exit("cannot name the function whose body starts at line %d" % (i + 1))
            name = m.group(1)
            if name in out:
                sys.exit("%s is defined twice" % name)
            out[name] = (sig, body, j + 2, k + 1)
            order.append(name)
            i = k + 1
        else:
            i += 1
    return out, order


def rename(text, renames):
    """Each call of a renamed function, NAME( with no space between: a
    label or variable of the same name (`goto fail`) is not renamed."""
    if not renames:
        return text
    pat = re.compile(r"\b(" + "|".join(map(re.escape, renames)) + r")\(")
    return pat.sub(lambda m: renames[m.group(1)] + "(", text)


def norm(s):
    return " ".join(s.split())


STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"' + r"|'(?:[^'\\\n]|\\.)*'")


def squeeze(s):
    """s without whitespace outside string and character literals: two
    bodies that differ only in layout squeeze to the same text."""
    out, pos = [], 0
    for m in STRING.finditer(s):
        out.append(re.sub(r"\s+", "", s[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(re.sub(r"\s+", "", s[pos:]))
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--rename", action="append", default=[])
    ap.add_argument("-w", "--ignore-layout", action="store_true",
                    help="compare bodies without the whitespace outside literals")
    ap.add_argument("old")
    ap.add_argument("new", nargs="+")
    a = ap.parse_args()
    renames = dict(r.split("=", 1) for r in a.rename)
    old = subprocess.run(["git", "show", "%s:%s" % (a.rev, a.old)], check=True,
                         capture_output=True, text=True).stdout
    ofun, oorder = functions(old)
    nfun, where = {}, {}
    new_lines = set()
    for path in a.new:
        with open(path) as f:
            text = f.read()
        fs, _ = functions(text)
        for name, v in fs.items():
            if name in nfun:
                print("FAIL %s: defined in both %s and %s" % (name, where[name], path))
                return 1
            nfun[name] = v
            where[name] = path
        new_lines.update(norm(l) for l in text.split("\n"))

    bad = 0
    used = set()
    for name in oorder:
        sig, body, _, _ = ofun[name]
        nn = renames.get(name, name)
        if nn not in nfun:
            print("FAIL %s: not defined in the new files" % nn)
            bad += 1
            continue
        used.add(nn)
        nsig, nbody, first, last = nfun[nn]
        want_sig = norm(re.sub(r"^static\s+", "", rename(sig, renames)))
        got_sig = norm(re.sub(r"^static\s+", "", nsig))
        same = (squeeze(rename(body, renames)) == squeeze(nbody) if a.ignore_layout
                else rename(body, renames) == nbody)
        if not same:
            print("FAIL %s (%s:%d): body differs" % (nn, where[nn], first))
            sys.stdout.writelines(difflib.unified_diff(
                rename(body, renames).splitlines(True), nbody.splitlines(True),
                "old " + name, "new " + nn, n=1))
            print()
            bad += 1
        elif want_sig != got_sig:
            print("FAIL %s (%s:%d): signature differs:\n  old %s\n  new %s" %
                  (nn, where[nn], first, want_sig, got_sig))
            bad += 1
        else:
            print("same %-28s -> %s:%d-%d (%d lines)%s" %
                  (nn, where[nn], first, last, last - first + 1,
                   "" if nn == name else " renamed from " + name))
    for nn in sorted(set(nfun) - used):
        print("new  %s (%s:%d): not in the old file" % (nn, where[nn], nfun[nn][2]))

    # what is not in a function
    inside = set()
    for _, _, first, last in ofun.values():
        inside.update(range(first, last + 1))
    missing = []
    for no, line in enumerate(old.split("\n"), 1):
        if no in inside or not line.strip():
            continue
        if norm(rename(line, renames)) not in new_lines:
            missing.append((no, line))
    for no, line in missing:
        print("line %s:%d not in the new files: %s" % (a.old, no, line))
    print("%d functions: %d %s, %d different; %d other lines of %s not found as they were"
          % (len(oorder), len(oorder) - bad,
             "the same but for layout" if a.ignore_layout else "identical", bad, len(missing),
             a.old))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
