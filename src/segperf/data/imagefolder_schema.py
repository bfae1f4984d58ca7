"""The config schema of `data=imagefolder` (conf/data/imagefolder.yaml), registered with the
others by segperf.schema.register_schema, and the resolver that sizes the classifier's head.

Kept beside the data module rather than in segperf/schema.py, which every workload shares and
which is near the size limit of a source file; torch-free, since it is loaded for every config
composition. The net's `num_classes` is `${data.num_classes}`, which is
`${imagefolder_classes:${data.root},${data.builtin.classes}}`: the class folders of `data.root`
(segperf.data.imagefolder_layout.count_classes), counted when the config resolves, before the net
is built, so that a user never types how many classes their folder has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from segperf.data.imagefolder_layout import count_classes
from segperf.schema import ImageDataSchema


@dataclass
class BuiltinImagesSchema:
    cache_dir: str = MISSING
    classes: int = MISSING
    per_class: int = MISSING
    seed: int = MISSING


@dataclass
class ImageFolderSchema(ImageDataSchema):
    # the stratified split's own seed, apart from `seed`: runs of other seeds validate on the same images
    split_seed: int = MISSING
    num_classes: int = MISSING
    builtin: BuiltinImagesSchema = field(default_factory=BuiltinImagesSchema)


def register_imagefolder(store: ConfigStore) -> None:
    """`data/imagefolder_schema` and `${imagefolder_classes:...}`. Idempotent."""
    store.store(group="data", name="imagefolder_schema", node=ImageFolderSchema)
    if not OmegaConf.has_resolver("imagefolder_classes"):
        OmegaConf.register_new_resolver("imagefolder_classes", count_classes)
