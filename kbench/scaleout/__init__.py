"""Scale-out: many submissions over this host's GPUs or a Ray cluster, in units of cases."""
