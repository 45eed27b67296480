"""Small helpers the recipes run with the *target* interpreter.

That interpreter may be anything from Python 2.7 to 3.13 with nothing but the standard
library, so this file sticks to syntax and modules all of them have. Commands:

  check-interp DESIRED_PYTHON      exit 0 if this interpreter is DESIRED_PYTHON (3.11, 3.6m,
                                   2.7mu, 3.13t), else print why not and exit 1
  describe                         one line: version, ABI and executable
  missing-build-requires [FILE]    the requirements of FILE's [build-system] (a pyproject.toml;
                                   setuptools and wheel when absent) not installed here, one a line
  can-build-wheels                 exit 0 if setuptools can make wheels here (wheel installed,
                                   or setuptools >= 70.1 which has bdist_wheel built in)
  wheel-info WHEEL                 name, version and tags of a wheel, one "key=value" a line
  same-version A B                 exit 0 if A and B are the same version after light PEP 440
                                   normalisation
"""
from __future__ import print_function

import os
import re
import sys
import sysconfig
import zipfile


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
    return 0


def describe():
    print("Python %s (abi %r) at %s" % (sys.version.split()[0], abi_flags(), sys.executable))
    return 0


def build_requires(pyproject):
    """Requirement strings of [build-system] requires, read without a TOML library.

    Only the part of TOML that this key uses in practice is understood: a (possibly
    multi-line) array of quoted strings.
    """
    if not pyproject or not os.path.isfile(pyproject):
        return ["setuptools", "wheel"]
    with open(pyproject) as f:
        text = f.read()
    section = re.search(r"^\[build-system\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not section:
        return ["setuptools", "wheel"]
    body = re.sub(r"#[^\n\"']*$", "", section.group(1), flags=re.M)
    array = re.search(r"^\s*requires\s*=\s*\[(.*?)\]", body, re.M | re.S)
    if not array:
        return ["setuptools", "wheel"]
    return [a or b for a, b in re.findall(r"\"([^\"]+)\"|'([^']+)'", array.group(1))]


def installed(name):
    """True if a distribution called name is installed (version specifiers are not checked:
    the interpreter's own setuptools is accepted as long as it can build, see can_build)."""
    try:
        from importlib import metadata  # Python 3.8+
        try:
            metadata.version(name)
            return True
        except metadata.PackageNotFoundError:
            return False
    except ImportError:
        try:
            import pkg_resources
        except ImportError:
            return False
        try:
            pkg_resources.get_distribution(name)
            return True
        except pkg_resources.DistributionNotFound:
            return False


def can_build_wheels():
    try:
        import setuptools
    except ImportError:
        return False
    try:
        import wheel  # noqa: F401
        return True
    except ImportError:
        pass
    try:
        from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        return False


def missing_build_requires(pyproject):
    missing = []
    for requirement in build_requires(pyproject):
        # Environment markers (; python_version < "3") are honoured only crudely: a
        # requirement with a marker is treated as needed, which at worst installs one
        # package more.
        name = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if name and not installed(name.group(1)):
            missing.append(requirement.strip())
    if not can_build_wheels():
        # Old setuptools without the wheel package cannot make wheels, whatever the
        # project declares.
        names = ["wheel"] if installed("setuptools") else ["setuptools", "wheel"]
        for name in names:
            if not any(re.match(r"^\s*%s\b" % name, r) for r in missing):
                missing.append(name)
    for requirement in missing:
        print(requirement)
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


def normalize(version):
    """Enough of PEP 440 normalisation to compare a requested version with a built one."""
    v = version.strip().lower()
    if v.startswith("v"):
        v = v[1:]
    public, _, local = v.partition("+")
    public = re.sub(r"[-_]", ".", public)
    public = re.sub(r"\.?(dev|post|a|b|rc)\.?(\d*)", lambda m: "." * (m.group(1) in ("dev", "post"))
                    + m.group(1) + (m.group(2) or "0"), public)
    public = re.sub(r"\.?(alpha|beta|c|pre|preview)\.?(\d*)", lambda m: {
        "alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc"}[m.group(1)] + (m.group(2) or "0"), public)
    local = re.sub(r"[-_]", ".", local)
    return public + ("+" + local if local else "")


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    command, args = argv[0], argv[1:]
    if command == "check-interp" and len(args) == 1:
        return check_interp(args[0])
    if command == "describe":
        return describe()
    if command == "missing-build-requires":
        return missing_build_requires(args[0] if args else "")
    if command == "can-build-wheels":
        return 0 if can_build_wheels() else 1
    if command == "wheel-info" and len(args) == 1:
        return wheel_info(args[0])
    if command == "same-version" and len(args) == 2:
        return 0 if normalize(args[0]) == normalize(args[1]) else 1
    print("pyhelper: unknown command or wrong arguments: %s" % " ".join(argv), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
