"""What each arm is (:mod:`~harness.arms.arm`), how two arms' sources differ
(:mod:`~harness.arms.sourcediff`), the software stack an arm's interpreter sees (:mod:`~harness.arms.stack`).
Nothing here knows an engine."""
