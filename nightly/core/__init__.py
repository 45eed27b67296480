"""The vocabulary every stage speaks, below config, plan, images and executors.

`axes` (architectures, accelerator families, Python ABIs), `matrix` (`Build`, `PackageMatrix`,
identifiers and their spellings), `limited` (a limited-API project's builds, one per floor),
`manylinux` (the policy: spellings, the check of a build's wheels, a zip's glibc), `suites`
(the Debian suites and Pythons of builder images) and `spec` (a builder image's declaration,
its validation and content hash). They import nothing of nightly outside this package but the
base modules, so any layer may import them without a circle (tests/unit/test_layers.py).
"""
