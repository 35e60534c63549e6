"""ImageFolder: one sub-folder of image files per class, decoded with PIL."""
import logging
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import numpy as np
import torch
from mmengine.logging import print_log
from PIL import Image

from ..registry import DATASETS
from .base import ClsDataset, Transform

IMG_EXTENSIONS = ('.bmp', '.jpeg', '.jpg', '.pgm', '.png', '.ppm', '.tif', '.tiff', '.webp')


@DATASETS.register_module()
class ImageFolder(ClsDataset):
    """Images under ``data_root/<class name>/...``; classes are the sorted folder names.

    Images are read lazily, converted to RGB (or gray), resized to ``size`` with
    bilinear filtering and scaled to [0, 1]; normalisation is the data preprocessor's.
    Files nested deeper inside a class folder belong to that class.  Hidden folders and
    files (a name starting with ``.``) are skipped: a hidden folder taken as a class would
    shift the labels of the classes after it.  A class folder without images keeps its
    label (a split may lack a class), with a warning.

    Args:
        data_root: the folder holding one sub-folder per class.
        size: output ``(height, width)``, or one int for square images.
        in_channels: 3 for RGB, 1 for gray.
        transforms: tensor transforms applied to each image after the resize.

    Example:
        >>> dataset = ImageFolder('data/pets', size=64)  # doctest: +SKIP
        >>> dataset.metainfo['classes'], dataset[0]['inputs'].shape  # doctest: +SKIP
        (('cat', 'dog'), torch.Size([3, 64, 64]))
    """

    def __init__(self, data_root: Union[str, Path], size: Union[int, Tuple[int, int]] = 224,
                 in_channels: int = 3, transforms: Sequence[Union[dict, Transform]] = ()):
        if in_channels not in (1, 3):
            raise ValueError(f'in_channels must be 1 or 3, got {in_channels}')
        super().__init__(transforms)
        root = Path(data_root)
        if not root.is_dir():
            raise FileNotFoundError(f'ImageFolder data_root {root} is not a folder')
        # hidden folders (.ipynb_checkpoints, .git) are no classes: one would shift every
        # label after it, and the splits' labels would disagree
        class_dirs = sorted(path for path in root.iterdir()
                            if path.is_dir() and not path.name.startswith('.'))
        self.classes = tuple(path.name for path in class_dirs)
        self.paths, self.labels = [], []
        for label, class_dir in enumerate(class_dirs):
            images = _images_in(class_dir)
            if not images:  # it keeps its label, as in a split that has its images
                print_log(f'ImageFolder: class folder {class_dir} has no images '
                          f'({", ".join(IMG_EXTENSIONS)})', logger='current',
                          level=logging.WARNING)
            self.paths.extend(images)
            self.labels.extend([label] * len(images))
        if not self.paths:
            raise FileNotFoundError(f'no images ({", ".join(IMG_EXTENSIONS)}) in the class '
                                    f'sub-folders of {root}')
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.mode = 'RGB' if in_channels == 3 else 'L'

    def load_image(self, index: int) -> torch.Tensor:
        with Image.open(self.paths[index]) as image:
            image = image.convert(self.mode).resize(self.size[::-1], Image.BILINEAR)
            array = np.asarray(image, dtype=np.float32) / 255
        return torch.from_numpy(array.reshape(*self.size, -1)).permute(2, 0, 1).contiguous()

    def __getitem__(self, index: int) -> dict:
        item = super().__getitem__(index)
        item['data_samples'].set_metainfo(dict(img_path=str(self.paths[index])))
        return item


def _images_in(class_dir: Path) -> List[Path]:
    """The image files under ``class_dir``, sorted, none inside a hidden folder or hidden."""
    return [path for path in sorted(class_dir.rglob('*'))
            if path.suffix.lower() in IMG_EXTENSIONS and path.is_file()
            and not any(part.startswith('.') for part in path.relative_to(class_dir).parts)]
