"""Small helpers the recipes run with the *target* interpreter.

That interpreter may be anything from Python 2.7 to 3.13 with nothing but the standard
library, so this file sticks to syntax and modules all of them have. Commands:

  check-interp DESIRED_PYTHON      exit 0 and describe it (below) if this interpreter is
                                   DESIRED_PYTHON (3.11, 3.6m, 2.7mu, 3.13t), else print why
                                   not and exit 1
  describe                         one line: version, ABI and executable
  wheel-info WHEEL                 name, version and tags of a wheel, one "key=value" a line
  same-version A B                 exit 0 if A and B are the same version (PEP 440, compared
                                   with packaging; pip's vendored copy where it is not installed)
  ldshared-without-rpath           setuptools' link command without the interpreter's own
                                   absolute -Wl,-rpath (exit 1, nothing printed, when none)

Build requirements are not read here: builds go through pip's PEP 517 front end, and
buildreqs.py checks them (with a TOML parser and packaging) for builds without isolation.
"""
from __future__ import print_function

import os
import re
import sys
import sysconfig


def parse_desired(desired):
    """'3.6m' -> ((3, 6), 'm'); '2.7mu' -> ((2, 7), 'mu'); '3.13t' -> ((3, 13), 't')."""
    match = re.match(r"^(\d+)\.(\d+)([a-z]*)$", desired.strip())
    if not match:
        raise SystemExit("DESIRED_PYTHON=%r is not of the form X.Y with an optional ABI suffix "
                         "(3.11, 3.6m, 2.7mu, 3.13t)" % desired)
    return (int(match.group(1)), int(match.group(2))), match.group(3)


def abi_flags():
    flags = getattr(sys, "abiflags", None)
    if flags is None:  # Python 2: derive what the wheel tag would say
        flags = "m" + ("u" if sys.maxunicode > 0xFFFF else "")
    return flags


def free_threaded():
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def check_interp(desired):
    version, suffix = parse_desired(desired)
    if tuple(sys.version_info[:2]) != version:
        print("%s is Python %d.%d, not %d.%d" % ((sys.executable,) + tuple(sys.version_info[:2]) + version))
        return 1
    if version[0] == 2 and suffix in ("m", "mu"):
        # The only ABI difference that matters on 2.7: narrow (UCS2, "m") or wide (UCS4, "mu").
        wide = sys.maxunicode > 0xFFFF
        if wide != (suffix == "mu"):
            print("%s is a %s-unicode Python 2.7 (cp27%s), not cp27%s"
                  % (sys.executable, "wide" if wide else "narrow", abi_flags(), suffix))
            return 1
    if "t" in suffix and not free_threaded():
        print("%s is not a free-threaded build (asked for %s)" % (sys.executable, desired))
        return 1
    if "t" not in suffix and free_threaded():
        print("%s is a free-threaded build (asked for %s)" % (sys.executable, desired))
        return 1
    return describe()  # the recipe's log line, without starting the interpreter again


def describe():
    print("Python %s (abi %r) at %s" % (sys.version.split()[0], abi_flags(), sys.executable))
    return 0


def wheel_info(path):
    base = os.path.basename(path)
    if not base.endswith(".whl"):
        raise SystemExit("%s is not a wheel" % path)
    parts = base[:-4].split("-")
    if len(parts) not in (5, 6):
        raise SystemExit("%s: not a wheel file name (name-version[-build]-py-abi-platform.whl)" % base)
    name, version = parts[0], parts[1]
    meta_version = None
    import zipfile  # here only: its import is most of this script's start otherwise

    with zipfile.ZipFile(path) as whl:
        for entry in whl.namelist():
            if entry.endswith(".dist-info/METADATA") and entry.count("/") == 1:
                for line in whl.read(entry).decode("utf-8", "replace").splitlines():
                    if line.startswith("Name: "):
                        name = line[6:].strip()
                    elif line.startswith("Version: "):
                        meta_version = line[9:].strip()
                    elif not line.strip():
                        break
    print("name=%s" % name)
    print("version=%s" % (meta_version or version))
    print("python_tag=%s" % parts[-3])
    print("abi_tag=%s" % parts[-2])
    print("platform_tag=%s" % parts[-1])
    return 0


def same_version(a, b):
    """True if a and b are the same version under PEP 440 (packaging's Version: 1.0 and
    1.0.0, 1.0.dev1 and 1.0-dev1 are equal)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # the interpreter has no packaging: pip vendors it
        try:
            from pip._vendor.packaging.version import InvalidVersion, Version
        except ImportError:  # neither: only the exact spelling is the same version
            return a.strip() == b.strip()
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a.strip() == b.strip()


def ldshared_without_rpath():
    """setuptools' link command (sysconfig LDSHARED, CC as setuptools substitutes it) without
    the interpreter's own -Wl,-rpath,/abs/path: a copied interpreter keeps the LDFLAGS of the
    machine it was built on, which would end up as the extension's RUNPATH. Prints nothing
    (exit 1) when there is no such rpath."""
    import shlex

    ldshared = sysconfig.get_config_var("LDSHARED") or ""
    words = shlex.split(ldshared)
    kept = [w for w in words if not (w.startswith(("-Wl,-rpath,/", "-Wl,-R/", "-Wl,--rpath=/")))]
    if len(kept) == len(words):
        return 1
    cc, env_cc = sysconfig.get_config_var("CC") or "", os.environ.get("CC", "")
    line = " ".join(shlex.quote(w) for w in kept)
    if env_cc and cc and ldshared.startswith(cc):
        line = env_cc + line[len(" ".join(shlex.quote(w) for w in shlex.split(cc))):]
    print(line)
    return 0


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    command, args = argv[0], argv[1:]
    if command == "check-interp" and len(args) == 1:
        return check_interp(args[0])
    if command == "describe":
        return describe()
    if command == "wheel-info" and len(args) == 1:
        return wheel_info(args[0])
    if command == "ldshared-without-rpath":
        return ldshared_without_rpath()
    if command == "same-version" and len(args) == 2:
        return 0 if same_version(args[0], args[1]) else 1
    print("pyhelper: unknown command or wrong arguments: %s" % " ".join(argv), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
