"""The platform's own log lines, through Python's ``logging``: one logger per module under ``slm``
(``log = logger(__name__)``), each record one line, ``[stage] what happened``.

The ``slm`` logger writes to the process's standard output at INFO (DEBUG under ``slm -v``), so that a line
lands where the stage runs: the console, a Ray job's log, a Ray worker's log forwarded to the driver, a
sweep trial's own log file (the handler writes to whatever ``sys.stdout`` is when the line is logged,
so ``contextlib.redirect_stdout`` catches it as it caught ``print``). A user attaches handlers to it
(``logging.getLogger("slm").addHandler(…)``: a file, a JSON formatter) or to one stage's module
(``slm.data.embed``), or sets its level; it does not propagate to the root logger, so an application that
configures logging gets no line twice."""

from __future__ import annotations

import logging
import os
import sys

ROOT = "slm"
VERBOSE_ENV = "SLM_VERBOSE"  # slm -v, inherited by the processes Ray starts (slm.runtime)


class _Stdout(logging.StreamHandler):
    """A handler on the current ``sys.stdout``, looked up at each record (not the one at its creation)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ sets one: the current stdout is used instead
        pass


def _configure() -> logging.Logger:
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, _Stdout) for h in root.handlers):
        handler = _Stdout()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.DEBUG if os.environ.get(VERBOSE_ENV) == "1" else logging.INFO)
        root.propagate = False
    return root


def logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (``__name__``), under the configured ``slm`` logger."""
    _configure()
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}")


def set_verbose(verbose: bool) -> None:
    """``slm -v``: DEBUG lines too."""
    _configure().setLevel(logging.DEBUG if verbose else logging.INFO)
