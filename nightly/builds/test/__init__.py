"""Testing a built package: smoke tests, limited-API tests on each Python."""
