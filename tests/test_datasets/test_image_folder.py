"""ImageFolder on a tiny folder of PNGs."""
import numpy as np
import pytest
import torch
from PIL import Image

from razorlib.datasets import ImageFolder


@pytest.fixture
def folder(tmp_path):
    colours = {'cat': (255, 0, 0), 'dog': (0, 0, 255)}
    for name, colour in colours.items():
        (tmp_path / name / 'nested').mkdir(parents=True)
        for i, sub in enumerate(['', '', 'nested']):
            pixels = np.full((6, 10, 3), colour, dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / name / sub / f'{i}.png')
    (tmp_path / 'cat' / 'notes.txt').write_text('not an image')
    (tmp_path / 'README.md').write_text('not a class')
    return tmp_path


def test_classes_labels_and_resize(folder):
    dataset = ImageFolder(folder, size=(4, 8))
    assert dataset.metainfo == dict(classes=('cat', 'dog'))
    assert len(dataset) == 6 and dataset.labels == [0, 0, 0, 1, 1, 1]
    item = dataset[3]
    assert item['inputs'].shape == (3, 4, 8)
    assert torch.allclose(item['inputs'][:, 0, 0], torch.tensor([0., 0., 1.]))
    assert item['data_samples'].gt_label.item() == 1
    assert item['data_samples'].img_path.endswith('dog/0.png')


def test_gray_square_images(folder):
    image = ImageFolder(folder, size=5, in_channels=1)[0]['inputs']
    assert image.shape == (1, 5, 5)
    assert image.max() < 1 and image.min() > 0  # red in gray is 0.299


def test_missing_root_and_empty_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='is not a folder'):
        ImageFolder(tmp_path / 'nope')
    (tmp_path / 'empty_class').mkdir()
    with pytest.raises(FileNotFoundError, match='no images'):
        ImageFolder(tmp_path)


def test_hidden_folders_are_no_classes_and_an_empty_class_keeps_its_label(folder):
    # Jupyter leaves .ipynb_checkpoints beside the classes and inside them
    (folder / '.ipynb_checkpoints').mkdir()
    (folder / 'dog' / '.ipynb_checkpoints').mkdir()
    Image.fromarray(np.zeros((6, 10, 3), np.uint8)).save(
        folder / 'dog' / '.ipynb_checkpoints' / '0-checkpoint.png')
    dataset = ImageFolder(folder, size=4)
    assert dataset.metainfo == dict(classes=('cat', 'dog'))
    assert dataset.labels == [0, 0, 0, 1, 1, 1]
    (folder / 'ant').mkdir()  # a split without this class's images: it keeps label 0
    dataset = ImageFolder(folder, size=4)
    assert dataset.metainfo == dict(classes=('ant', 'cat', 'dog'))
    assert dataset.labels == [1, 1, 1, 2, 2, 2]
