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


def write_classes(root, names, value=10):
    for name in names:
        (root / name).mkdir(parents=True)
        Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(root / name / 'x.png')


def test_pinned_classes_keep_every_label_when_a_split_lacks_a_class(tmp_path, monkeypatch):
    logs = []
    monkeypatch.setattr('razorlib.datasets.image_folder.print_log',
                        lambda message, **kwargs: logs.append(message))
    train, val = tmp_path / 'train', tmp_path / 'val'
    write_classes(train, ['cat', 'cow', 'dog'])
    write_classes(val, ['cat', 'dog'])  # no 'cow' images collected for val
    assert ImageFolder(val, size=4).labels == [0, 1]  # unpinned: dog shifts to 1
    for classes in (train, str(train), ['cat', 'cow', 'dog']):
        pinned = ImageFolder(val, size=4, classes=classes)
        assert pinned.metainfo == dict(classes=('cat', 'cow', 'dog'))
        assert pinned.labels == [0, 2] and pinned[1]['data_samples'].gt_label.item() == 2
    assert logs and all("for the classes ['cow']" in log and 'keep their labels' in log
                        for log in logs)
    ordered = ImageFolder(val, size=4, classes=['dog', 'cat'])  # labels follow the list
    assert {path.parent.name: label for path, label in zip(ordered.paths, ordered.labels)} == {
        'dog': 0, 'cat': 1}


def test_a_class_folder_outside_the_pinned_classes_is_refused(tmp_path):
    write_classes(tmp_path / 'train', ['cat', 'dog'])
    write_classes(tmp_path / 'val', ['cat', 'cow', 'dog'])
    with pytest.raises(ValueError, match=r"val: class folders \['cow'\] are not among the 2 "):
        ImageFolder(tmp_path / 'val', size=4, classes=tmp_path / 'train')
    with pytest.raises(FileNotFoundError, match="classes 'cat' is not a folder"):
        ImageFolder(tmp_path / 'val', size=4, classes='cat')
    with pytest.raises(ValueError, match='classes must be distinct names'):
        ImageFolder(tmp_path / 'val', size=4, classes=['cat', 'cat', 'cow', 'dog'])


@pytest.mark.parametrize('in_channels', [1, 3])
def test_16_bit_gray_images_are_scaled_by_their_bit_depth(tmp_path, in_channels):
    (tmp_path / 'k').mkdir()
    Image.fromarray(np.full((4, 4), 32768, np.uint16)).save(tmp_path / 'k' / 'gray16.png')
    with Image.open(tmp_path / 'k' / 'gray16.png') as image:
        assert image.mode == 'I;16'
    image = ImageFolder(tmp_path, size=2, in_channels=in_channels)[0]['inputs']
    assert image.shape == (in_channels, 2, 2)
    assert torch.allclose(image, torch.full_like(image, 32768 / 65535))


def test_32_bit_values_beyond_16_bits_are_refused_naming_the_file(tmp_path):
    (tmp_path / 'k').mkdir()
    Image.fromarray(np.full((4, 4), 70000, np.int32)).save(tmp_path / 'k' / 'wide.tif')
    with pytest.raises(ValueError, match=r'wide.tif \(PIL mode I\) has values from 70000'):
        ImageFolder(tmp_path, size=2)[0]


def test_a_float_image_is_refused_naming_the_file(tmp_path):
    """A 32-bit float image was converted to 8 bits by PIL, which clips: values in [0, 1]
    came out as zeros and ones, without a word."""
    (tmp_path / 'k').mkdir()
    Image.fromarray(np.full((4, 4), 0.5, np.float32)).save(tmp_path / 'k' / 'float.tif')
    with pytest.raises(ValueError, match=r"float.tif is a 32-bit float image \(PIL mode 'F'\)"):
        ImageFolder(tmp_path, size=2)[0]


def test_images_in_symlinked_sub_folders_belong_to_their_class(tmp_path):
    store = tmp_path / 'store'
    write_classes(store, ['more'])
    root = tmp_path / 'root'
    write_classes(root, ['a'])
    (root / 'a' / 'more').symlink_to(store / 'more', target_is_directory=True)
    (root / 'a' / 'loop').symlink_to(root / 'a', target_is_directory=True)  # a cycle
    dataset = ImageFolder(root, size=4)
    assert [str(p.relative_to(root)) for p in dataset.paths] == ['a/more/x.png', 'a/x.png']


@pytest.mark.parametrize('content, cause', [
    ('half', 'OSError: image file is truncated'),
    ('foreign', 'UnidentifiedImageError: cannot identify image file'),
])
def test_an_unreadable_image_is_named(tmp_path, content, cause):
    write_classes(tmp_path, ['a', 'b'])
    noise = np.random.RandomState(0).randint(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / 'a' / 'x.png')
    whole = (tmp_path / 'a' / 'x.png').read_bytes()
    broken = tmp_path / 'b' / 'x.png'
    broken.write_bytes(whole[:len(whole) // 2] if content == 'half' else b'no image')
    dataset = ImageFolder(tmp_path, size=4)
    assert dataset[0]['inputs'].shape == (3, 4, 4)
    with pytest.raises(OSError) as info:  # PIL's own message names no file when cut short
        dataset[1]
    assert str(info.value).startswith(f'ImageFolder: cannot read the image {broken}: {cause}')


@pytest.mark.parametrize('size, error, message', [
    (0, ValueError, 'ImageFolder size must be at least 1, got 0'),
    ((4, -2), ValueError, 'ImageFolder size must be at least 1, got -2'),
    ((4, 4, 4), TypeError, r'ImageFolder size must be an int or \(height, width\), got '
     r'\(4, 4, 4\)'),
    (4.0, TypeError, r'ImageFolder size must be an int or \(height, width\), got 4.0'),
    ((4, 2.5), TypeError, r'ImageFolder size must be an integer \(pixels\), got 2.5'),
])
def test_a_bad_size_is_refused_by_name_before_any_read(tmp_path, size, error, message):
    # PIL refused it at the first read (in a loader's worker), naming neither
    write_classes(tmp_path, ['a'])
    with pytest.raises(error, match=f'^{message}'):
        ImageFolder(tmp_path, size=size)


def test_a_size_of_a_config_list_or_numpy_ints_is_taken(tmp_path):
    write_classes(tmp_path, ['a'])
    assert ImageFolder(tmp_path, size=[2, 3])[0]['inputs'].shape == (3, 2, 3)
    assert ImageFolder(tmp_path, size=np.int64(2)).size == (2, 2)
