#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/doc_examples.py: the docs' shell examples against the built tool.

    doc_examples.py examples DOCDIR WORKDIR SUBST...
    doc_examples.py versions DOCDIR VERSION_LINE
    doc_examples.py links DOCROOT
    doc_examples.py configs DOCDIR WORKDIR SUBST...

examples: every fenced block of DOCDIR/*.md whose first line starts with
"$ " shows a command and its output.  It must be a ```console block: its
commands are run (sh -c, in WORKDIR, stdout and stderr together) and the
lines shown after each command must appear in its output, in that order
(other lines may come between them).  In a shown line "..." matches any
text, a line of only "..." stands for lines left out, and runs of spaces
match runs of spaces.  Before the comparison each SUBST ("ACTUAL=>SHOWN")
replaces text of the output, so an install in a temporary directory reads
as the install the docs show.  A block that cannot run here says why on its
fence: ```console not-run: WHY.

versions: the version numbers the docs quote (accel's own and the plugin
ABI's) equal those of `accel --version` (VERSION_LINE, "accel X (plugin ABI
M.N)"); each sentence listed in VERSION_QUOTES must still be there.

links: every relative link of the *.md files under DOCROOT (an installed
doc directory) resolves to a file or directory inside DOCROOT.

configs: every ```json block of DOCDIR/*.md is a config a reader may paste
into a file: written to a file in WORKDIR, `accel config validate` must
say it is ok.  Each SUBST ("ACTUAL=>SHOWN") first replaces SHOWN by ACTUAL
in the block, so a path the docs show names what this test built.  A block
that is not a whole config says why on its fence: ```json not-a-config: WHY.
"""
import glob
import os
import re
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def md_files(docdir):
    return sorted(glob.glob(os.path.join(docdir, "*.md")))


def blocks(path):
    """(first line number, info string, lines) of each fenced block."""
    out, cur = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if cur is None:
                m = re.match(r"^( *)```(.*)$", line)
                if m:
                    cur = (n, m.group(2).strip(), [], len(m.group(1)))
            elif line.lstrip().startswith("```"):
                out.append(cur[:3])
                cur = None
            else:
                ind = cur[3]
                cur[2].append(line[ind:] if line[:ind].strip() == "" else line)
    if cur is not None:
        fail("%s:%d: an unterminated code block" % (path, cur[0]))
    return out


def line_regex(shown):
    parts = [re.sub(r"(\\ )+", r"\\s+", re.escape(p)) for p in shown.strip().split("...")]
    return re.compile(r"\s*" + ".*".join(parts) + r"\s*")


def check_output(where, cmd, shown, got):
    lines = got.splitlines()
    i = 0
    for s in shown:
        if not s.strip() or s.strip() == "...":
            continue
        rx = line_regex(s)
        while i < len(lines) and not rx.fullmatch(lines[i]):
            i += 1
        if i == len(lines):
            print("---- output of: %s" % cmd, file=sys.stderr)
            print(got, file=sys.stderr)
            fail("%s: `%s` does not print (in this order) the line\n  %s" % (where, cmd, s))
        i += 1


def run_examples(docdir, workdir, substs):
    n_run = n_skip = 0
    for path in md_files(docdir):
        name = os.path.basename(path)
        for first, info, lines in blocks(path):
            if not lines or not lines[0].startswith("$ "):
                continue
            where = "%s:%d" % (name, first)
            words = info.split()
            if not words or words[0] != "console":
                fail("%s: a shell example with output must be a ```console block "
                     "(run by this test) or ```console not-run: WHY (fence is ```%s)"
                     % (where, info))
            if len(words) > 1:
                if words[1] != "not-run:" or len(words) < 3:
                    fail("%s: fence '```%s': only ```console or ```console not-run: WHY"
                         % (where, info))
                n_skip += 1
                print("%s: not run (%s)" % (where, " ".join(words[2:])))
                continue
            segs = []
            for line in lines:
                if line.startswith("$ "):
                    segs.append((line[2:], []))
                else:
                    segs[-1][1].append(line)
            for cmd, shown in segs:
                p = subprocess.run(["sh", "-c", cmd], cwd=workdir, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=300)
                got = p.stdout.decode("utf-8", "replace")
                for s in substs:
                    actual, shown_as = s.split("=>", 1)
                    got = got.replace(actual, shown_as)
                if p.returncode != 0:
                    print(got, file=sys.stderr)
                    fail("%s: `%s` exited %d" % (where, cmd, p.returncode))
                check_output(where, cmd, shown, got)
            n_run += 1
            print("%s: ok (%d command%s)" % (where, len(segs), "" if len(segs) == 1 else "s"))
    if n_run < 5:
        fail("only %d examples were run" % n_run)
    print("%d examples run, %d not run (each says why)" % (n_run, n_skip))


# (file, regular expression whose group 1 is a version, which one): the
# sentences that quote the current version.  Each must match at least once.
VERSION_QUOTES = [
    ("README.md", r"plugin ABI (\d+\.\d+)", "abi"),
    ("abi.md", r"`ACCEL_ABI_MAJOR` is (\d+), `ACCEL_ABI_MINOR` is (\d+)", "abi2"),
    ("cli.md", r"`accel --version` prints `accel (\S+) \(plugin ABI (\d+\.\d+)\)`", "both"),
    ("cli.md", r"- accel: (\S+) \(plugin ABI (\d+\.\d+)\)", "both"),
    ("checkpoints.md", r"this accel \((\d+\.\d+\.\d+)\)", "version"),
]


def check_versions(docdir, version_line):
    m = re.fullmatch(r"accel (\S+) \(plugin ABI (\d+)\.(\d+)\)", version_line.strip())
    if not m:
        fail("`accel --version` printed '%s'" % version_line.strip())
    version, abi = m.group(1), m.group(2) + "." + m.group(3)
    for name, rx, kind in VERSION_QUOTES:
        path = os.path.join(docdir, name)
        text = open(path, encoding="utf-8").read()
        found = list(re.finditer(rx, text))
        if not found:
            fail("%s no longer has a sentence matching %s: update VERSION_QUOTES in %s"
                 % (name, rx, __file__))
        for f in found:
            line = text.count("\n", 0, f.start()) + 1
            if kind == "abi":
                got, want = f.group(1), abi
            elif kind == "abi2":
                got, want = f.group(1) + "." + f.group(2), abi
            elif kind == "version":
                got, want = f.group(1), version
            else:
                got, want = f.group(1) + " " + f.group(2), version + " " + abi
            if got != want:
                fail("%s:%d says %s; `accel --version` says %s" % (name, line, got, want))
    print("the docs quote accel %s, plugin ABI %s, as `accel --version` says" % (version, abi))


def check_links(root):
    n = 0
    paths = []
    for d, _, files in os.walk(root):   # not into symlinked directories
        paths += [os.path.join(d, f) for f in files if f.endswith(".md")]
    for path in sorted(paths):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"[a-zA-Z][a-zA-Z+.-]*:", target) or target.startswith("#"):
                continue
            rel = target.split("#", 1)[0]
            line = text.count("\n", 0, m.start()) + 1
            dest = os.path.realpath(os.path.join(os.path.dirname(path), rel))
            inside = dest == os.path.realpath(root) or dest.startswith(os.path.realpath(root) + os.sep)
            if not os.path.exists(dest):
                fail("%s:%d: link to %s: no such file in the installed docs"
                     % (os.path.relpath(path, root), line, target))
            if not inside:
                fail("%s:%d: link to %s leaves the installed doc directory"
                     % (os.path.relpath(path, root), line, target))
            n += 1
    if n < 20:
        fail("only %d links found under %s" % (n, root))
    print("%d links in the installed docs resolve inside %s" % (n, root))


def check_configs(docdir, workdir, substs):
    n_ok = n_skip = 0
    for path in md_files(docdir):
        name = os.path.basename(path)
        for first, info, lines in blocks(path):
            words = info.split()
            if not words or words[0] != "json":
                continue
            where = "%s:%d" % (name, first)
            if len(words) > 1:
                if words[1] != "not-a-config:" or len(words) < 3:
                    fail("%s: fence '```%s': only ```json or ```json not-a-config: WHY"
                         % (where, info))
                n_skip += 1
                print("%s: not a config (%s)" % (where, " ".join(words[2:])))
                continue
            text = "\n".join(lines) + "\n"
            for s in substs:
                actual, shown_as = s.split("=>", 1)
                if shown_as:
                    text = text.replace(shown_as, actual)
            cfg = os.path.abspath(os.path.join(workdir, "%s-%d.json" % (name[:-3], first)))
            with open(cfg, "w", encoding="utf-8") as f:
                f.write(text)
            p = subprocess.run(["accel", "config", "validate", "--no-env", cfg], cwd=workdir,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
            out = p.stdout.decode("utf-8", "replace")
            if p.returncode != 0 or out.strip() != cfg + ": ok":
                print(out + p.stderr.decode("utf-8", "replace"), file=sys.stderr)
                fail("%s: the ```json block does not validate (accel config validate exited %d); "
                     "fix it, or mark a fragment ```json not-a-config: WHY" % (where, p.returncode))
            n_ok += 1
            print("%s: ok" % where)
    if n_ok < 3:
        fail("only %d ```json blocks were validated" % n_ok)
    print("%d json blocks validate, %d are not configs (each says why)" % (n_ok, n_skip))


def main(argv):
    if len(argv) >= 4 and argv[1] == "examples":
        run_examples(argv[2], argv[3], argv[4:])
    elif len(argv) == 4 and argv[1] == "versions":
        check_versions(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "links":
        check_links(argv[2])
    elif len(argv) >= 4 and argv[1] == "configs":
        check_configs(argv[2], argv[3], argv[4:])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv)
