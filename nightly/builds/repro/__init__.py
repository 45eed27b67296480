"""Reproducibility: normalising packages, the rebuild-and-compare check."""
