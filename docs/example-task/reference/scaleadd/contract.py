"""scaleadd, worker side: a submission defines scale_add(x, y) and returns 2x + y."""
from kbench import submission

ENTRY_POINTS = ("scale_add",)
SUBMISSION_FILES = ("submission.py",)


def load(path):
    path = submission.find(path, SUBMISSION_FILES)
    return submission.entry_point(submission.import_file(path), path, "scale_add", "scale_add(x, y)")


def call(fn, args):
    return submission.returned(fn(args["x"], args["y"]), "scale_add", ("out",))
