"""Side assertions: checks, run before any question is sent, that each arm's server is on the side of the fix
it claims. Each gives a :class:`~harness.checks.result.CheckResult` with its evidence.

* :mod:`~harness.checks.static` (kind ``source``): no server needed; the arm's own interpreter runs the
  stdlib-only ``source_probe.py`` by path.
* :mod:`~harness.checks.live` (kinds ``fingerprint``, ``http``, ``custom``): against the running server;
  :mod:`~harness.checks.processes` (``process_env``, ``log_line``): the serving processes' environment and log;
  :mod:`~harness.checks.routed` (``routed_experts``): the experts the MoE gate really picks.
* :mod:`~harness.checks.match`: how a found value is compared with ``equals`` / ``contains`` / ``lacks``.
* :mod:`~harness.checks.result`: the outcome, and :func:`~harness.checks.result.assert_checks`, which raises
  the :class:`~harness.checks.result.SideAssertionError` the run reports (exit 3).
"""
