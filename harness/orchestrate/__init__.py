"""``abh run`` (and ``abh ab``): from a config to a comparison, server launches included. The pipeline
(:mod:`~harness.orchestrate.pipeline`) runs the schedule (:mod:`~harness.orchestrate.schedule`) on the servers
of a :class:`~harness.orchestrate.servers.ServerPool`, recording every event in the run directory
(:mod:`~harness.orchestrate.rundir`)."""
