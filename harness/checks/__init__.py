"""Side assertions, run before any question is sent: each arm's server is on the side of the fix it claims (a
:class:`~harness.checks.result.CheckResult` each, with its evidence). :mod:`~harness.checks.static` needs no
server; :mod:`~harness.checks.live`, :mod:`~harness.checks.processes` and :mod:`~harness.checks.routed` ask
the running one; :mod:`~harness.checks.armdiff` says how the arms' launches differ."""
