"""The Dask build phase of a night (`nightly run --cluster ADDRESS`).

    orchestrator.py   the phase: plan the cluster, stage the inputs, submit, wait, give up
    dispatch.py       priorities, resources, bounds; handing tasks to the scheduler
    collector.py      the workers' events and results, filed into the day folder
    worker.py         what runs on a worker: one build through the ordinary Runner
    staging.py        the staging store: its layout, inputs, log streaming, attempts
    verify.py         verified staging: the night's seal, package records (docs/cluster.md)

dask and distributed are imported only inside the functions that use them.
"""
