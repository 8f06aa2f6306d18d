"""Adds the folder holding ``arms/`` to Hydra's search path, so arm files compose as group ``arms``."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class AbhSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from harness.config import arms_root

        search_path.append(provider="abh-arms", path=f"file://{arms_root()}")
