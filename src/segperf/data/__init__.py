"""The data sources, one subpackage each (`carvana`, `imagefolder`, `mnist`), beside what they
share: the base DataModule (`base`), the decoded-sample cache (`cache`), cold reads (`cold`),
the prefetch thread (`prefetch`), resumable loading (`resumable`), worker seeding (`seeding`),
the file checks of both image checkers (`filechecks`) and built-in data folders (`folders`).

Kept import-free so `python -m segperf.data.carvana.synthetic` does not pull in torch and Lightning.

Configs saved before the data sources had folders of their own name the old module paths in
their `_target_` (`segperf.data.datamodule.CarvanaDataModule`): a run folder's .hydra/config.yaml,
a user's own config folder that copied conf/data/. `MOVED` maps each old module to its new home,
and this package's `__getattr__` answers the old name with the new module (Hydra's `_target_`
lookup walks the path by attribute), with a FutureWarning that names the path to write instead.
`segperf.data.mnist` and `segperf.data.imagefolder` are packages now: each answers its
DataModule's name itself (`lazy_exports`), so `segperf.data.mnist.MnistDataModule` still works.
The two generators' commands keep their first names too: `python -m segperf.data.synthetic` and
`python -m segperf.data.digits` (the modules `synthetic` and `digits` here only run the new ones).
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType

# the module paths before the data sources moved into carvana/, imagefolder/ and mnist/ (the
# old segperf.data.imagefolder and segperf.data.mnist modules are those packages, see above)
MOVED = {
    "layout": "segperf.data.carvana.layout",
    "checks": "segperf.data.carvana.checks",
    "dataset": "segperf.data.carvana.dataset",
    "datamodule": "segperf.data.carvana.datamodule",
    "decode": "segperf.data.carvana.decode",
    "augment": "segperf.data.carvana.augment",
    "imagefolder_layout": "segperf.data.imagefolder.layout",
    "imagefolder_checks": "segperf.data.imagefolder.checks",
    "imagefolder_dataset": "segperf.data.imagefolder.dataset",
    "imagefolder_cache": "segperf.data.imagefolder.cache",
    "imagefolder_builtin": "segperf.data.imagefolder.builtin",
    "idx": "segperf.data.mnist.idx",
}


def lazy_exports(package: str, names: dict[str, str]):
    """A package's `__getattr__` that imports `names` (name -> module) on first use, so the package
    itself stays import-free: `segperf.data.carvana.CarvanaDataModule` loads torch only when used."""

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__


def __getattr__(name: str) -> ModuleType:
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"segperf.data.{name} is now {MOVED[name]}: write that in your config's _target_ (or import)",
        FutureWarning,
        stacklevel=2,
    )
    return importlib.import_module(MOVED[name])
