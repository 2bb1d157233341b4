"""slm's lines go through ``logging`` (issue 47): one line per record, as the stages printed them, on the
current standard output (so a trial's redirected output catches them), to handlers a user attaches to the
``slm`` logger or to one module's, at the level ``slm -v`` sets, never twice through the root logger."""

from __future__ import annotations

import contextlib
import io
import logging

from slm.log import logger, set_verbose


def test_a_line_is_printed_once_as_it_was_written(capsys):
    root_records: list[logging.LogRecord] = []
    catcher = logging.Handler()
    catcher.emit = root_records.append
    logging.getLogger().addHandler(catcher)
    try:
        logger("slm.data.pack").info("[pack] runs/x is complete and current")
    finally:
        logging.getLogger().removeHandler(catcher)
    assert capsys.readouterr().out == "[pack] runs/x is complete and current\n"
    assert root_records == []  # an application's own logging configuration does not print it again


def test_a_user_attaches_a_handler_and_a_redirect_catches_the_line():
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logging.getLogger("slm.tune").addHandler(handler)
    redirected = io.StringIO()
    try:
        with contextlib.redirect_stdout(redirected):  # as a sweep trial's own log file
            logger("slm.tune.sweep").info("[sweep] wave 1: 3 of 9 trials finished earlier")
            logger("slm.data.embed").info("[embed] not this handler's")
    finally:
        logging.getLogger("slm.tune").removeHandler(handler)
    assert [(r.name, r.getMessage()) for r in seen] == [("slm.tune.sweep", "[sweep] wave 1: 3 of 9 trials finished earlier")]
    assert redirected.getvalue().splitlines() == ["[sweep] wave 1: 3 of 9 trials finished earlier",
                                                  "[embed] not this handler's"]


def test_verbose_is_a_level(capsys):
    log = logger("slm.train.loop")
    try:
        set_verbose(True)
        log.debug("[train] shown under -v")
        set_verbose(False)
        log.debug("[train] hidden")
    finally:
        set_verbose(False)
    assert capsys.readouterr().out == "[train] shown under -v\n"
