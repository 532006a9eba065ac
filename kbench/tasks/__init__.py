"""Tasks: finding and loading them, the interface their modules implement, suites, checks and scores."""
