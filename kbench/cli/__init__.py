"""The command line: click commands, reports, and the entry point that starts workers first."""
