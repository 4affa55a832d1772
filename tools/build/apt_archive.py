"""The Debian archive this machine's apt already uses, for tools/free_threaded.sh.

    python3 tools/build/apt_archive.py [APT_DIR]      (default /etc/apt)

prints ``URI`` and, when the entry names one, ``SIGNED_BY``, tab-separated:
the first ``deb`` entry of a Debian release suite (not -security, -updates
or -backports) with the ``main`` component, read from ``sources.list``,
``sources.list.d/*.list`` (one-line format) and ``sources.list.d/*.sources``
(deb822), in apt's order.  free_threaded.sh adds a source-only entry for
the next release on that archive (a mirror, a proxy, a snapshot: whatever
the machine is set up with) instead of a fixed address.  Exits 1, saying
what it read, when there is none.  No third-party module: it runs under
the system Python before anything is installed.
"""
import glob
import os
import shlex
import sys

# Debian's release codenames (their suites; "stable" and friends too).
DEBIAN_SUITES = {"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid",
                 "oldoldstable", "oldstable", "stable", "testing", "unstable"}


def _one_line_entries(text):
    """(types, uris, suites, components, signed_by) of one-line entries."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = shlex.split(line)
        kind, rest = words[0], words[1:]
        options = {}
        if rest and rest[0].startswith("["):
            opts = []
            while rest:
                word = rest.pop(0)
                opts.append(word)
                if word.endswith("]"):
                    break
            for opt in " ".join(opts).strip("[]").split():
                key, _, value = opt.partition("=")
                options[key] = value
        if len(rest) < 2:
            continue
        yield [kind], [rest[0]], [rest[1]], rest[2:], options.get("signed-by")


def _deb822_entries(text):
    """(types, uris, suites, components, signed_by) of deb822 stanzas."""
    stanzas, fields, last = [], {}, None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                stanzas.append(fields)
            fields, last = {}, None
            continue
        if line[0] in " \t" and last is not None:      # a continuation line
            fields[last] += " " + line.strip()
            continue
        key, _, value = line.partition(":")
        last = key.strip().lower()
        fields[last] = value.strip()
    for f in stanzas:
        if f.get("enabled", "yes").lower() == "no":
            continue
        signed = f.get("signed-by")
        # A Signed-By holding the key itself (several lines) is no path.
        if signed and (" " in signed or not signed.startswith("/")):
            signed = None
        yield (f.get("types", "").split(), f.get("uris", "").split(),
               f.get("suites", "").split(), f.get("components", "").split(), signed)


def source_files(apt_dir):
    """apt's sources, in the order apt reads them."""
    files = []
    main = os.path.join(apt_dir, "sources.list")
    if os.path.isfile(main):
        files.append(main)
    parts = os.path.join(apt_dir, "sources.list.d")
    files += sorted(glob.glob(os.path.join(parts, "*.list")) +
                    glob.glob(os.path.join(parts, "*.sources")))
    return files


def debian_archive(apt_dir="/etc/apt"):
    """(uri, signed_by or None) of the machine's Debian archive, or None."""
    for path in source_files(apt_dir):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        entries = _deb822_entries(text) if path.endswith(".sources") else _one_line_entries(text)
        for types, uris, suites, components, signed in entries:
            if "deb" in types and "main" in components and uris \
                    and any(s in DEBIAN_SUITES for s in suites):
                return uris[0], signed
    return None


def main(argv):
    apt_dir = argv[1] if len(argv) > 1 else "/etc/apt"
    found = debian_archive(apt_dir)
    if found is None:
        read = ", ".join(source_files(apt_dir)) or "no file"
        print(f"apt_archive: no Debian archive (a deb entry of a release suite with main) in "
              f"{read}; add a deb-src entry for Debian's python3.13 yourself", file=sys.stderr)
        return 1
    uri, signed = found
    print(uri + ("\t" + signed if signed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
