"""Channel clients: what publishes to (and installs from) a package channel other than the
store's folders: a self-hosted conda channel and its repodata (`conda.py`, py-rattler),
anaconda.org (`anaconda.py`), a PyPI-style index through twine (`pypi.py`); `childenv.py`:
the minimal environment those clients run in.
"""
