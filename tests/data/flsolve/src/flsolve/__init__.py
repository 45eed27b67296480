"""A 2-file Fortran + LAPACK extension: solve(a, b) calls LAPACK's dgesv from Fortran."""
from ._flsolve import solve

__all__ = ["solve"]
