"""The compiler cache: its wiring into a build, its wrapper scripts, its store."""
