"""Running one build: its job and recipe environment, runner, log, take-back, collect."""
