"""The ``abh`` commands, one module per command: :mod:`~harness.cli.main` (the dispatcher, ``--version``),
:mod:`~harness.cli.run` (``abh run``: the Hydra app and its callbacks), :mod:`~harness.cli.eval`,
:mod:`~harness.cli.ab` (a run of the pipeline over two given URLs), :mod:`~harness.cli.compare`,
:mod:`~harness.cli.power`, :mod:`~harness.cli.report`; :mod:`~harness.cli.flags` holds what they share."""
