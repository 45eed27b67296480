"""nightly: nightly and release builds of a project's compiled binaries."""

__version__ = "0.1.0"
