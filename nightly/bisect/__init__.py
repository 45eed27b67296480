"""`nightly bisect`: the search (search.py), its steps built by the night's runner
(run.py), and the bisects a night starts itself under `[notify] bisect = true` (auto.py)."""
