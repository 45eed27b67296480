"""Publishing the night: the upload and its gate (`upload.py`, `gate.py`), remote retention
(`retention.py`), promotion of a release candidate (`promote.py`), checking what users get
(`validate.py`) and the published report (`reports.py`).

What it publishes through lives below it: object stores and the bucket layout
(nightly.stores), index pages (nightly.index), channel clients (nightly.channels) and signed
provenance (nightly.provenance).
"""
