"""scaleadd, worker side: a submission defines scale_add(x, y) and returns 2x + y."""
from kbench.tasks import interface

ENTRY_POINTS = ("scale_add",)
SUBMISSION_FILES = ("submission.py",)


def load(path):
    path = interface.find(path, SUBMISSION_FILES)
    return interface.entry_point(interface.import_file(path), path, "scale_add", "scale_add(x, y)")


def call(fn, args):
    return interface.returned(fn(args["x"], args["y"]), "scale_add", ("out",))
