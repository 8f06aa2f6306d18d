"""Small shared helpers with no project knowledge: redaction of secrets (:mod:`~harness.util.redact`,
:mod:`~harness.util.redact_stdio`), dotted keys (:mod:`~harness.util.keys`), command lines
(:mod:`~harness.util.cmdline`), where results may be written (:mod:`~harness.util.paths`)."""
