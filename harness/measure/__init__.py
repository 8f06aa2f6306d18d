"""Measurements against one running server (an eval of a task, a scoring or routing pass), on the one async
runner (:mod:`~harness.measure.runner`: event loop, signals, watchdogs, progress)."""
