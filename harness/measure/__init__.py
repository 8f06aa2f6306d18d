"""Measurements against one running server: :mod:`~harness.measure.evaluation` (one eval of a task),
:mod:`~harness.measure.divergence_pass` (the teacher-forced scoring pass the divergence reads), and the one
async runner both use (:mod:`~harness.measure.runner`: event loop, signals, watchdogs, progress)."""
