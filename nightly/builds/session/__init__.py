"""The build session every caller opens, and the night's local build phase."""
