#!/usr/bin/env python3
"""Print the Debian archive URI this machine's apt is configured with (for debootstrap).

Reads /etc/apt/sources.list and /etc/apt/sources.list.d/* (one-line and deb822 formats) and
prints the first URI serving a plain Debian suite (not -security/-updates), so the sandbox
image is built from whatever mirror the machine already trusts.
"""
import glob
import re

SUITE = "bookworm"


def candidates():
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
        try:
            text = open(path).read()
        except OSError:
            continue
        if path.endswith(".sources"):  # deb822 stanzas separated by blank lines
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split():
                    for uri in fields.get("URIs", "").split():
                        yield uri, fields.get("Suites", "").split()
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    yield m.group(1), [m.group(2)]


for uri, suites in candidates():
    if SUITE in suites and "security" not in uri:
        print(uri.rstrip("/"))
        break
