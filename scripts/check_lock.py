"""Print the installed versions of the project's tools and fail if any installed package differs from
requirements.lock (the environment .ci/run tests must be the pinned one, not whatever a machine had).

    python scripts/check_lock.py [--tools-only]
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
TOOLS = ("ruff", "mypy", "pytest", "pytest-xdist", "pytest-timeout", "llama-cpp-python", "orjson", "numpy",
         "scipy", "hydra-core", "aiohttp")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    out = {}
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if m:
            out[norm(m.group(1))] = m.group(2)
    return out


def main() -> int:
    want = pins()
    if "--tools-only" in sys.argv:
        print("pinned: " + ", ".join(f"{t}=={want[t]}" for t in TOOLS if t in want))
        return 0
    have = {norm(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    wrong = [f"{n} {have[n]} (lock: {v})" for n, v in sorted(want.items()) if n in have and have[n] != v]
    print("installed: " + ", ".join(f"{t}=={have.get(t, 'missing')}" for t in TOOLS))
    if wrong:
        print(f"error: {len(wrong)} installed package(s) differ from requirements.lock: " + "; ".join(wrong))
        return 1
    print(f"every locked package that is installed matches requirements.lock ({sum(n in have for n in want)} "
          f"of {len(want)} installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
