"""Platform rules a build obeys: the manylinux policy, free-threaded Pythons."""
