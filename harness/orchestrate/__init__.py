"""``abh run``: from a config to a comparison, server launches included.

* :mod:`~harness.orchestrate.pipeline`: the pipeline (prepare, static checks, measure, finish), for ``abh run`` and
  ``abh ab`` alike;
* :mod:`~harness.orchestrate.schedule`: the order of the evals and which need a fresh server launch;
* :mod:`~harness.orchestrate.servers`: :class:`ServerPool`, the servers' lifetimes and launch ids;
* :mod:`~harness.orchestrate.divergence_phase`: the scoring passes after the evals (divergence);
* :mod:`~harness.orchestrate.rundir`: the run directory: names, manifest, config digest, resume rule, run.log;
* :mod:`~harness.orchestrate.sequential`: a sequential run's looks; :mod:`~harness.orchestrate.design`: the printed design;
* :mod:`~harness.orchestrate.interrupts`: Ctrl-C / SIGTERM in every phase.
"""
