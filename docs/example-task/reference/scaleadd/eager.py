"""The baseline: what a user would write without a kernel (loaded by contract.load like a submission)."""


def scale_add(x, y):
    return 2 * x + y
