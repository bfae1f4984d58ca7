"""`python -m segperf.train +opt=tuned`: the newest tune's preset, found in segperf's cache folder.

`python -m segperf.tune` writes its winner as `opt/tuned.yaml` under `<cache>/tune/`
(`$SEGPERF_CACHE`, default `~/.cache/segperf`: segperf.tune.output.CACHE_PRESET); this plugin
appends that folder to the config search path of segperf's command lines, so that the `opt`
group holds `tuned` beside the presets in conf/opt/. Search path entries are only read when a
config is looked up, so a machine that has never been tuned loses nothing (Hydra's own message
lists the presets there are). Other Hydra applications in the same environment are left alone:
the folder is added only where segperf's conf/ is on the search path.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class SegperfTunedSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from segperf.config import CONFIG_DIR, segperf_cache_dir

        ours = f"file://{CONFIG_DIR}"
        if any(element.path in (ours, str(CONFIG_DIR)) for element in search_path.get_path()):
            search_path.append(provider="segperf-tune", path=f"file://{segperf_cache_dir() / 'tune'}")
