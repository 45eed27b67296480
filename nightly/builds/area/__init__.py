"""Where a build runs: the build account's area, staged tools, stable slots, ownership."""
