"""ImageFolder: one sub-folder of image files per class, decoded with PIL."""
import logging
import numbers
import os
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import numpy as np
import torch
from mmengine.logging import print_log
from PIL import Image

from ..registry import DATASETS
from ..utils.checks import integer_number
from ..utils.errors import first_line
from .base import ClsDataset, Transform

IMG_EXTENSIONS = ('.bmp', '.jpeg', '.jpg', '.pgm', '.png', '.ppm', '.tif', '.tiff', '.webp')
# PIL's modes of 16-bit gray images (a 16-bit PNG opens as 'I;16', a 16-bit TIFF may open
# as 'I'): PIL's convert('L') clips them at 255 instead of scaling, so they are scaled here
WIDE_GRAY_MODES = ('I;16', 'I;16L', 'I;16B', 'I;16N', 'I')
WIDE_GRAY_MAX = 65535

ClassesArg = Union[None, str, Path, Sequence[str]]


@DATASETS.register_module()
class ImageFolder(ClsDataset):
    """Images under ``data_root/<class name>/...``; classes are the sorted folder names,
    or the ``classes`` given.

    Images are read lazily, converted to RGB (or gray), resized to ``size`` with
    bilinear filtering and scaled to [0, 1] (16-bit gray images by 65535);
    normalisation is the data preprocessor's.  Files nested deeper inside a class folder
    belong to that class, also through symlinked folders.  Hidden folders and files (a
    name starting with ``.``) are skipped: a hidden folder taken as a class would shift
    the labels of the classes after it.  A class without images (an empty folder, or
    with ``classes`` no folder at all) keeps its label, with a warning.

    Args:
        data_root: the folder holding one sub-folder per class.
        size: output ``(height, width)``, or one int for square images.
        in_channels: 3 for RGB, 1 for gray.
        transforms: tensor transforms applied to each image after the resize.
        classes: pin the class list, so that every split labels a class alike even when
            a split lacks some class folders: a list of class names (label = position),
            or a folder (str or Path) whose sorted sub-folders name the classes, such as
            the train split.  A class folder in ``data_root`` that is not in the list is
            refused.  ``None``: the sorted sub-folders of ``data_root``.

    Example:
        >>> dataset = ImageFolder('data/pets', size=64)  # doctest: +SKIP
        >>> dataset.metainfo['classes'], dataset[0]['inputs'].shape  # doctest: +SKIP
        (('cat', 'dog'), torch.Size([3, 64, 64]))
        >>> val = ImageFolder('data/pets_val', classes='data/pets')  # doctest: +SKIP
    """

    def __init__(self, data_root: Union[str, Path], size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3, transforms: Sequence[Union[dict, Transform]] = (),
                 classes: ClassesArg = None):
        if in_channels not in (1, 3):
            raise ValueError(f'in_channels must be 1 or 3, got {in_channels}')
        self.size = _height_width(size)
        super().__init__(transforms)
        root = Path(data_root)
        if not root.is_dir():
            raise FileNotFoundError(f'ImageFolder data_root {root} is not a folder')
        self.classes = _pinned_classes(root, classes)
        self.paths, self.labels = [], []
        without_images = []
        for label, name in enumerate(self.classes):
            images = _images_in(root / name) if (root / name).is_dir() else []
            if not images:  # it keeps its label, as in a split that has its images
                without_images.append(name)
            self.paths.extend(images)
            self.labels.extend([label] * len(images))
        if not self.paths:
            raise FileNotFoundError(f'no images ({", ".join(IMG_EXTENSIONS)}) in the class '
                                    f'sub-folders of {root}')
        if without_images:
            print_log(f'ImageFolder {root}: no images ({", ".join(IMG_EXTENSIONS)}) for the '
                      f'classes {without_images} (an empty folder or none); they keep their '
                      'labels', logger='current', level=logging.WARNING)
        self.mode = 'RGB' if in_channels == 3 else 'L'

    def load_image(self, index: int) -> torch.Tensor:
        path = self.paths[index]
        try:
            with Image.open(path) as image:
                if image.mode == 'F':  # converting would clip it to 0..255: zeros and ones
                    raise ValueError(f'ImageFolder: {path} is a 32-bit float image (PIL mode '
                                     "'F'), which has no fixed range to scale to [0, 1]; "
                                     'store it as an 8- or 16-bit image')
                if image.mode in WIDE_GRAY_MODES:
                    image = Image.fromarray(_wide_gray_in_unit_range(image, path), mode='F')
                    array = np.asarray(image.resize(self.size[::-1], Image.BILINEAR))[..., None]
                    array = array.repeat(3 if self.mode == 'RGB' else 1, axis=2)
                else:
                    image = image.convert(self.mode).resize(self.size[::-1], Image.BILINEAR)
                    array = np.asarray(image, dtype=np.float32) / 255
        except OSError as err:
            # PIL's decoders name no file ('Truncated File Read', 'broken data stream'),
            # and in a loader's worker the index is all that is left to find it by
            raise OSError(f'ImageFolder: cannot read the image {path}: {first_line(err)}') \
                from err
        return torch.from_numpy(array.reshape(*self.size, -1)).permute(2, 0, 1).contiguous()

    def __getitem__(self, index: int) -> dict:
        item = super().__getitem__(index)
        item['data_samples'].set_metainfo(dict(img_path=str(self.paths[index])))
        return item


def _height_width(size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    """``size`` as ``(height, width)``, refused by name unless one or two positive ints:
    PIL refuses it only at the first read, in a loader's worker, naming neither."""
    sizes = (size, size) if isinstance(size, numbers.Integral) else size
    if isinstance(sizes, str) or not isinstance(sizes, Sequence) or len(sizes) != 2:
        raise TypeError(f'ImageFolder size must be an int or (height, width), got {size!r}')
    height, width = (integer_number(side, 'ImageFolder size', 'pixels', minimum=1)
                     for side in sizes)
    return height, width


def _class_folder_names(folder: Path) -> Tuple[str, ...]:
    """The sorted names of the sub-folders of ``folder``, hidden ones left out: hidden
    folders (.ipynb_checkpoints, .git) are no classes; one would shift every label after
    it, and the splits' labels would disagree."""
    return tuple(sorted(path.name for path in folder.iterdir()
                        if path.is_dir() and not path.name.startswith('.')))


def _pinned_classes(root: Path, classes: ClassesArg) -> Tuple[str, ...]:
    """The class names of ``root`` in label order: ``classes`` when given, refusing a
    class folder of ``root`` outside them (its images would have no label)."""
    found = _class_folder_names(root)
    if classes is None:
        return found
    if isinstance(classes, (str, Path)):
        if not Path(classes).is_dir():
            raise FileNotFoundError(
                f'ImageFolder classes {str(classes)!r} is not a folder: give the folder whose '
                'sub-folders name the classes (e.g. the train split) or a list of names')
        pinned = _class_folder_names(Path(classes))
    else:
        pinned = tuple(classes)
        if len(set(pinned)) != len(pinned) or not all(isinstance(c, str) for c in pinned):
            raise ValueError(f'ImageFolder classes must be distinct names, got {classes}')
    unknown = sorted(set(found) - set(pinned))
    if unknown:
        raise ValueError(f'ImageFolder {root}: class folders {unknown} are not among the '
                         f'{len(pinned)} classes given ({str(classes)[:200]})')
    return pinned


def _images_in(class_dir: Path) -> List[Path]:
    """The image files under ``class_dir``, sorted, none inside a hidden folder or hidden.

    Symlinked folders are followed (``Path.rglob`` does not follow them on Python < 3.13,
    which dropped their images silently); a folder reached twice, e.g. through a link to
    an ancestor, is walked once.
    """
    seen = {os.path.realpath(class_dir)}
    images = []
    for folder, subfolders, files in os.walk(class_dir, followlinks=True):
        kept = []
        for name in sorted(subfolders):
            real = os.path.realpath(os.path.join(folder, name))
            if not name.startswith('.') and real not in seen:
                seen.add(real)
                kept.append(name)
        subfolders[:] = kept
        images.extend(Path(folder, name) for name in files
                      if not name.startswith('.') and Path(name).suffix.lower() in IMG_EXTENSIONS)
    return sorted(path for path in images if path.is_file())


def _wide_gray_in_unit_range(image: Image.Image, path: Path) -> np.ndarray:
    """A 16-bit gray image as float32 in [0, 1], scaled by its bit depth (65535)."""
    array = np.asarray(image, dtype=np.float32)
    if array.size and (array.min() < 0 or array.max() > WIDE_GRAY_MAX):
        raise ValueError(f'ImageFolder: {path} (PIL mode {image.mode}) has values from '
                         f'{array.min():g} to {array.max():g}, outside the 16-bit range '
                         f'0-{WIDE_GRAY_MAX} it is read in')
    return array / WIDE_GRAY_MAX
