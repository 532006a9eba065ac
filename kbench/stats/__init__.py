"""Statistics: estimates and intervals of timed calls, the processes' offsets, comparing two results."""
