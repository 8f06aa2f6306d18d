"""The report templates' compiled code kept between processes: Jinja's own file cache of template bytecode.

Compiling the report's templates costs a command more CPU than rendering them. Jinja keys each compiled
template by its name and checks the source's checksum (and the Python version) before using it, so an edited
template or another interpreter compiles afresh; the default directory is the user's own (mode 0700, owner
checked) under the temp directory. A cache that cannot be made, read or written is no cache: the templates are
compiled as they were, and the report is the same bytes either way.
"""

from __future__ import annotations

import jinja2
from jinja2.bccache import Bucket

#: abh's report templates' files in the cache directory: apart from other programs' Jinja templates, whose
#: environments compile the same source to other code (the key is the template's name and file only)
PATTERN = "__abh_report_%s.cache"


class _QuietCache(jinja2.FileSystemBytecodeCache):
    """A file cache whose failures are misses: a torn or foreign file is recompiled, a full disk not written."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a truncated or garbled file (marshal raises several kinds): compiled afresh
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass  # nothing kept: the next process compiles again


def bytecode_cache(directory: str | None = None) -> jinja2.BytecodeCache | None:
    """The cache in ``directory`` (default: Jinja's per-user directory), or None when it cannot be had."""
    try:
        return _QuietCache(directory, PATTERN)
    except (OSError, RuntimeError):  # no safe directory: compile every time
        return None
