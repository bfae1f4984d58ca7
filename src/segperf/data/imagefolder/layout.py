"""The image-folder layout (`data=imagefolder`): torchvision's ImageFolder, and its split.

Two forms, told apart by the folder itself:

- `ROOT/<class>/<image>`: one folder per class; validation is a stratified, seeded split of
  it (`data.holdout_frac` of each class, at least one image of every class of two or more).
- `ROOT/train/<class>/<image>` with `ROOT/val/<class>/<image>`: the split is given. (`train/`
  alone is the first form inside `train/`; a `test/` beside them is left alone.)

A class is a folder name, any characters included (spaces, unicode, `=`, `,`); the classes are
sorted by name and numbered 0, 1, ... in that order, as torchvision numbers them. Images may
sit in subfolders of a class folder. An image is a file with one of IMAGE_EXTENSIONS (any
case); every other file, and every hidden file or folder (a name starting with "."), is not
part of the data set and is ignored. Nothing here opens an image: the file checks are
segperf.data.imagefolder.checks, the decoding segperf.data.imagefolder.dataset.

Kept free of torch and numpy: the number of classes is read from here while the config is
resolved (`${imagefolder_classes:...}`, segperf.schema), before the heavy imports.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from segperf.errors import DataLayoutError

# torchvision's IMG_EXTENSIONS, and GIF (a palette image like any other here)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
LAYOUT_HINT = (
    "Expected an image folder: ROOT/<class>/<image> (one folder per class), or ROOT/train/<class>/<image> "
    "with ROOT/val/<class>/<image>."
)


@dataclass(frozen=True)
class ImageSample:
    path: Path
    label: int  # the class's index in FolderLayout.classes


@dataclass(frozen=True)
class LayoutProblem:
    """A problem of the folders themselves (not of one image file); `kind` as in imagefolder_checks."""

    path: Path
    reason: str
    kind: str  # "empty class" | "single class" | "no training class"


@dataclass
class FolderLayout:
    root: Path
    form: str  # "classes" (ROOT/<class>) or "train/val"
    classes: list[str]  # sorted; a class's index is its label
    train: list[ImageSample]  # every image of the training folders, sorted by path
    val: list[ImageSample] | None  # the given validation images (train/val form), else None
    problems: list[LayoutProblem] = field(default_factory=list)
    empty_classes: list[str] = field(default_factory=list)  # class folders without an image
    ignored_files: int = 0  # non-image files, not counted as samples

    @property
    def samples(self) -> list[ImageSample]:
        return self.train + (self.val or [])


def is_hidden(name: str) -> bool:
    return name.startswith(".")


def is_image_name(name: str) -> bool:
    return not is_hidden(name) and name.lower().endswith(IMAGE_EXTENSIONS)


def _class_folders(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_dir() and not is_hidden(p.name)), key=lambda p: p.name)


def _walk(folder: Path) -> tuple[list[Path], int]:
    """The image files under `folder` (subfolders too, hidden ones not), sorted, and how many
    other files it holds."""
    images, others = [], 0
    for parent, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not is_hidden(d))
        for name in files:
            if is_image_name(name):
                images.append(Path(parent) / name)
            elif not is_hidden(name):
                others += 1
    return sorted(images), others


def _has_image(folder: Path) -> bool:
    """Whether a class folder holds any image, stopping at the first (cheap on a big folder)."""
    for _, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if not is_hidden(d)]
        if any(is_image_name(name) for name in files):
            return True
    return False


def split_form(root: Path) -> bool:
    """True for the train/val form: ROOT/train/ and ROOT/val/ are both folders."""
    return (root / "train").is_dir() and (root / "val").is_dir()


def class_names(root: str | Path) -> list[str]:
    """The classes of an image folder, sorted: its (training) class folders that hold an image."""
    root = Path(root).expanduser()
    train = root / "train" if split_form(root) or _only_train(root) else root
    return [p.name for p in _class_folders(train) if _has_image(p)]


def _only_train(root: Path) -> bool:
    """ROOT/train/ is the only visible folder: the one-folder form inside it."""
    folders = _class_folders(root)
    return [p.name for p in folders] == ["train"]


def count_classes(root: str | None, builtin_classes: int) -> int:
    """`${imagefolder_classes:${data.root},${data.builtin.classes}}`: what the classifier's head
    is sized for. Never raises: a folder that cannot be read still gives a number (2), and the
    run's data check then stops with what is wrong with the folder, before any training."""
    if root in (None, "", "None", "null"):
        return int(builtin_classes)
    try:
        return max(2, len(class_names(root)))
    except OSError:
        return 2


def scan_folder(root: str | Path) -> FolderLayout:
    """The classes and images of an image folder, with the problems of its folders (an empty
    class folder, a single class, a validation class without training images) listed, not
    raised: the run reports them together with the bad files. A folder that is not an image
    folder at all (missing, or no class folders) raises DataLayoutError."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataLayoutError(
            f"data.root={root} does not exist or is not a folder. {LAYOUT_HINT} "
            "Leave data.root unset to use the built-in image folder."
        )
    given = split_form(root)
    train_dir = root / "train" if given or _only_train(root) else root
    folders = _class_folders(train_dir)
    if not folders:
        raise DataLayoutError(f"no class folders in {train_dir}. {LAYOUT_HINT}")
    found = {p.name: _walk(p) for p in folders}
    val_found = {p.name: _walk(p) for p in _class_folders(root / "val")} if given else {}
    problems: list[LayoutProblem] = []
    empty = [name for name, (images, _) in found.items() if not images]
    for name in empty:
        problems.append(
            LayoutProblem(
                train_dir / name, "empty class folder (no images); add its images or remove it", "empty class"
            )
        )
    classes = [name for name in found if found[name][0]]
    for name in sorted(set(val_found) - set(found)):
        problems.append(
            LayoutProblem(
                root / "val" / name,
                f"class only in val/ (no {train_dir / name}); add its training images or remove it",
                "no training class",
            )
        )
    if len(classes) < 2:
        which = f"one class ({classes[0]})" if classes else "no class with images"
        problems.append(
            LayoutProblem(
                train_dir,
                f"{which}: a classifier needs two classes or more; add a folder of images per class",
                "single class",
            )
        )
    index = {name: i for i, name in enumerate(classes)}
    train = [ImageSample(path, index[name]) for name in classes for path in found[name][0]]
    val = [ImageSample(path, index[name]) for name, (paths, _) in val_found.items() if name in index for path in paths]
    others = sum(n for _, n in found.values()) + sum(n for _, n in val_found.values())
    return FolderLayout(root, "train/val" if given else "classes", classes, train, val if given else None,
                        problems, empty, others)  # fmt: skip


@dataclass(frozen=True)
class ClassSplit:
    train: list[ImageSample]
    val: list[ImageSample]
    classes: list[str]

    def summary(self) -> dict:
        """The `dataset` counts of results.json: images, classes and the images of each class."""
        train, val = Counter(s.label for s in self.train), Counter(s.label for s in self.val)
        return {
            "images": len(self.train) + len(self.val),
            "train_images": len(self.train),
            "val_images": len(self.val),
            "classes": len(self.classes),
            "class_names": list(self.classes),
            "class_images": {name: {"train": train[i], "val": val[i]} for i, name in enumerate(self.classes)},
        }


def _order_key(seed: int, root: Path, sample: ImageSample) -> str:
    """A seeded order that depends on the files' names only, not on the order the file system
    lists them in (as the Carvana split orders cars by a digest of their id)."""
    relative = sample.path.relative_to(root) if sample.path.is_relative_to(root) else sample.path
    return hashlib.sha256(f"{seed}:{relative.as_posix()}".encode()).hexdigest()


def stratified_split(
    samples: list[ImageSample], classes: list[str], holdout_frac: float = 0.2, seed: int = 0, root: Path | None = None
) -> ClassSplit:
    """Hold out `round(holdout_frac * n)` of each class's n images (at least one of a class of
    two or more, never its last), chosen by a seeded digest of their paths: the same files and
    seed give the same split, and each class is in validation in its own proportion."""
    if not 0.0 <= holdout_frac <= 1.0:
        raise ValueError(f"data.holdout_frac={holdout_frac} is outside [0, 1]; 0.2 holds out 20% of each class.")
    base = root if root is not None else Path("/")
    train: list[ImageSample] = []
    val: list[ImageSample] = []
    for label in range(len(classes)):
        members = sorted((s for s in samples if s.label == label), key=lambda s: _order_key(seed, base, s))
        n = len(members)
        held = min(n - 1, max(1 if n > 1 and holdout_frac > 0 else 0, round(holdout_frac * n))) if n else 0
        val += members[:held]
        train += members[held:]
    return ClassSplit(sorted(train, key=lambda s: s.path), sorted(val, key=lambda s: s.path), list(classes))
