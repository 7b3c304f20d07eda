"""A module outside the project's apps whose import leaves a mark: a message naming it
must not make a worker import it."""

import os
from pathlib import Path

Path(os.environ["DJANGO_TEST_MARK"]).write_text("imported")


def x() -> None:
    pass
