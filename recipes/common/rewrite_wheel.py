"""rewrite_wheel.py WHEEL VERSION OUTDIR: a copy of WHEEL whose version is VERSION.

For projects whose build sets its own version ([project] version_from = "rewrite", or
"auto" finding no way to set it from outside): the dist-info (and .data) folder is renamed,
METADATA's Version replaced, RECORD regenerated with every file's sha256 and size, and the
file named for the new version (PEP 427 / the binary distribution format). Signatures
(RECORD.jws, RECORD.p7s) no longer match and are dropped. Prints the new wheel's path.

`rewrite_wheel.py --still-says WHEEL OLD` prints the files of WHEEL that still hold OLD as
a literal (the recipe's warning names them).

Standard library only: it runs with the target interpreter (Python 3.6 and newer).
"""

import base64
import csv
import hashlib
import io
import os
import re
import sys
import zipfile

WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?P<rest>(-\d[^-]*)?-[^-]+-[^-]+-[^-]+)\.whl$")


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def rewrite(path, version, outdir):
    base = os.path.basename(path)
    match = WHEEL_RE.match(base)
    if not match:
        raise SystemExit(f"{base} is not a wheel file name")
    name, old = match.group("name"), match.group("version")
    # Wheel file names spell "-" in a version as "_" (there is none in a normalized one).
    new = version.replace("-", "_")
    old_info, new_info = f"{name}-{old}.dist-info/", f"{name}-{new}.dist-info/"
    old_data, new_data = f"{name}-{old}.data/", f"{name}-{new}.data/"
    out = os.path.join(outdir, "{}-{}{}.whl".format(name, new, match.group("rest")))
    if os.path.abspath(out) == os.path.abspath(path):
        raise SystemExit(f"{base} already has version {version}")
    records = []
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        names = src.namelist()
        if old_info + "METADATA" not in names:
            raise SystemExit(f"{base} has no {old_info}METADATA")
        for info in src.infolist():
            arc = info.filename
            if arc in (old_info + "RECORD", old_info + "RECORD.jws", old_info + "RECORD.p7s"):
                continue
            data = src.read(info)
            if arc.startswith(old_info):
                arc = new_info + arc[len(old_info):]
            elif arc.startswith(old_data):
                arc = new_data + arc[len(old_data):]
            if arc == new_info + "METADATA":
                data = set_metadata_version(data, version)
            copy = zipfile.ZipInfo(arc, info.date_time)
            copy.external_attr = info.external_attr
            copy.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(copy, data)
            if not arc.endswith("/"):
                records.append((arc, record_hash(data), str(len(data))))
        records.append((new_info + "RECORD", "", ""))
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(records)
        record = zipfile.ZipInfo(new_info + "RECORD", (1980, 1, 1, 0, 0, 0))
        record.external_attr = 0o644 << 16
        record.compress_type = zipfile.ZIP_DEFLATED
        dst.writestr(record, buf.getvalue().encode("utf-8"))
    return out


def set_metadata_version(data, version):
    """METADATA with its (first, header) Version field replaced; the body is left alone."""
    text = data.decode("utf-8")
    head, sep, body = text.partition("\n\n")
    lines = head.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Version:"):
            lines[i] = "Version: " + version
            break
    else:
        raise SystemExit("METADATA has no Version field")
    return ("\n".join(lines) + sep + body).encode("utf-8")


MAX_SCAN = 64 * 1024 * 1024  # bytes of one member searched for the old version


def still_says(path, version):
    """The files of a wheel (outside its dist-info) that still hold `version` as a literal:
    quoted in Python source, NUL-terminated in a compiled file (a C string). Prints them one a
    line: the rewrite's warning names them, and says nothing when none does (a project that
    reads its version from the metadata reports the new one)."""
    raw = version.encode()
    needles = [b"'" + raw + b"'", b'"' + raw + b'"', raw + b"\0"]
    found = []
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            top = info.filename.split("/", 1)[0]
            if info.is_dir() or top.endswith((".dist-info", ".data")) or info.file_size > MAX_SCAN:
                continue
            data = zf.read(info)
            if any(n in data for n in needles):
                found.append(info.filename)
    return found


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--still-says":
        print("\n".join(still_says(sys.argv[2], sys.argv[3])))
        sys.exit(0)
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(rewrite(sys.argv[1], sys.argv[2], sys.argv[3]))
