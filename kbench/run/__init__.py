"""The run in the trusted parent: inputs and ground truth, the targets' worker processes, the records."""
