"""Where a task's data comes from: a local file or directory, ``hf:REPO[:CONFIG]`` through `datasets`, or an
http(s) URL; read into rows of string fields with a content hash. Every problem is one :class:`DatasetError`
line (exit 2), before any server is asked anything.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from harness.tasks.interface import DatasetError

#: ``hf:REPO[:CONFIG]``: a Hugging Face dataset through `datasets`.
HF_PREFIX = "hf:"
URL_PREFIXES = ("http://", "https://")
#: a URL's download is refused beyond this size (MMLU's CSV is about 8 MB)
MAX_DOWNLOAD_BYTES = 256 * 1024 * 1024


def is_url(spec: str) -> bool:
    return spec.startswith(URL_PREFIXES)


def is_hf(spec: str) -> bool:
    return spec.startswith(HF_PREFIX)


def content_hash(rows: Sequence[dict[str, str]], keys: Sequence[str]) -> str:
    """sha256 over the rows' ``keys`` (sorted JSON, one line per row): the same whichever source they came from."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps({k: r.get(k) for k in keys}, ensure_ascii=False, sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def read_bytes(spec: str, what: str) -> tuple[bytes, str]:
    """(the bytes, where they came from) of a local file or an http(s) URL."""
    if is_url(spec):
        import urllib.error
        import urllib.request
        from urllib.parse import urlsplit

        host = urlsplit(spec).hostname or ""
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        # a proxy for the world, never for this machine (as the client does for servers)
        opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if loopback else []))
        try:
            with opener.open(spec, timeout=120) as r:
                raw = r.read(MAX_DOWNLOAD_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise DatasetError(f"cannot download the {what} data from {spec}: HTTP {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise DatasetError(f"cannot download the {what} data from {spec}: {reason}") from None
        if len(raw) > MAX_DOWNLOAD_BYTES:
            raise DatasetError(f"{spec}: larger than {MAX_DOWNLOAD_BYTES >> 20} MiB; download it and give the path")
        return raw, spec
    path = Path(spec).expanduser()
    try:
        return path.read_bytes(), str(path.resolve())
    except FileNotFoundError:
        raise DatasetError(f"{what} data file not found: {path}") from None
    except IsADirectoryError:
        raise DatasetError(f"{path} is a directory, not a {what} data file") from None
    except OSError as e:
        raise DatasetError(f"cannot read {what} data file {path}: {e.strerror or e}") from None


def text_of(raw: bytes, where: str, what: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DatasetError(f"{where}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                           f"{what} files are UTF-8") from None


def refuse_conflicting_duplicates(rows: Sequence[dict[str, str]], where: str,
                                  question: Callable[[dict[str, str]], Hashable],
                                  label: Callable[[dict[str, str]], object], lines: Sequence[int] | None = None) -> None:
    """A question asked twice (the fields its prompt is made of: ``question``) with two different labels is a
    DatasetError naming both lines (``lines``: each row's line in ``where``; else its row number): one of them
    grades right answers as wrong. The same question with the same label twice is one warning line on stderr
    (it counts once per appearance)."""
    def place(k: int) -> str:
        return f"line {lines[k]}" if lines is not None else f"row {k + 1}"

    first: dict[Hashable, int] = {}
    repeated: list[tuple[int, int]] = []
    for i, r in enumerate(rows):
        j = first.setdefault(question(r), i)
        if j == i:
            continue
        if label(rows[j]) != label(r):
            raise DatasetError(f"{where}: {place(j)} and {place(i)} ask the same question with different answers "
                               f"({label(rows[j])!r} and {label(r)!r}): one of them grades right answers as wrong; "
                               "fix the data")
        repeated.append((j, i))
    if repeated:
        j, i = repeated[0]
        more = f" (and {len(repeated) - 1} more)" if len(repeated) > 1 else ""
        print(f"abh: warning: {where}: {place(j)} and {place(i)} ask the same question with the same answer{more}: "
              "each counts once per appearance", file=sys.stderr, flush=True)


def read_csv(text: str, where: str, required: Sequence[str], lines: list[int] | None = None) -> list[dict[str, str]]:
    """The rows of a CSV file with a header holding ``required`` columns (any others are kept); ``lines``, when
    given, gets each row's line number."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        raise DatasetError(f"{where}: a CSV with columns {', '.join(required)} is needed; missing "
                           f"{', '.join(missing)} (found {', '.join(h for h in header if h) or 'no header'})")
    rows = []
    try:
        for row in reader:
            if None in row:
                raise DatasetError(f"{where}:{reader.line_num}: more fields than the header names")
            rows.append({k: v if v is not None else "" for k, v in row.items() if k})
            if lines is not None:
                lines.append(reader.line_num)
    except csv.Error as e:
        raise DatasetError(f"{where}:{reader.line_num}: not valid CSV ({e})") from None
    return rows


def read_headerless_csv(text: str, where: str, columns: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a CSV file without a header whose fields are ``columns`` in order (Hendrycks' MMLU files)."""
    rows = []
    try:
        for lineno, fields in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
            if not fields:
                continue
            if len(fields) != len(columns):
                raise DatasetError(f"{where}:{lineno}: {len(fields)} fields, want {len(columns)} "
                                   f"({', '.join(columns)})")
            rows.append(dict(zip(columns, fields, strict=True)))
    except csv.Error as e:
        raise DatasetError(f"{where}: not valid CSV ({e})") from None
    return rows


def load_hf(spec: str, split: str, default_config: str | None,
            convert: Callable[[dict[str, Any]], dict[str, str]], what: str) -> list[dict[str, str]]:
    """``hf:REPO[:CONFIG]`` through `datasets` (imported only when asked for: it is slow to import); each record
    converted by ``convert``."""
    repo, _, config = spec[len(HF_PREFIX):].partition(":")
    config = config or default_config or ""
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{spec}: the `datasets` package is not installed (pip install 'abh[hf]')") from None
    try:  # pragma: no cover - needs the Hugging Face hub
        ds = datasets.load_dataset(repo, config or None, split=split)
        return [convert(dict(r)) for r in ds]
    except Exception as e:  # pragma: no cover - needs the Hugging Face hub
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"could not load {repo} ({config or 'default'}, {split}) through `datasets` for {what}: "
                           f"{first}") from None
