"""What a person sees of the builds: progress lines and the live view."""
