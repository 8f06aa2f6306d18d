"""What each arm is: :mod:`~harness.arms.arm` (an arm's config resolved to an interpreter, a source tree or git
worktree with its patches, env and flags), :mod:`~harness.arms.sourcediff` (how two arms' sources differ),
:mod:`~harness.arms.stack` and the stdlib-only :mod:`~harness.arms.stack_probe` (the software stack an arm's
interpreter sees). Nothing here knows an engine: engines take a resolved arm."""
