"""CIFAR10 on tiny fake batches in the official python-pickle format."""
import pickle

import numpy as np
import pytest
import torch

from razorlib.datasets import CIFAR10


def write_batches(folder, per_batch=3, protocol=2):
    """Fake ``data_batch_1..5`` and ``test_batch``; pixel values encode the image index."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']
    for b, name in enumerate(names):
        data = np.zeros((per_batch, 3072), dtype=np.uint8)
        data[:, :1024] = np.arange(per_batch)[:, None] + 10 * b  # red channel
        data[:, 1024:2048] = 255  # green channel
        batch = {b'batch_label': name.encode(), b'data': data,
                 b'labels': [(b + i) % 10 for i in range(per_batch)],
                 b'filenames': [b'x.png'] * per_batch}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    return folder


@pytest.mark.parametrize('nested, protocol', [(False, 2), (True, pickle.HIGHEST_PROTOCOL)])
def test_loads_train_and_test_splits(tmp_path, nested, protocol):
    folder = write_batches(tmp_path / 'cifar-10-batches-py' if nested else tmp_path,
                           protocol=protocol)
    train = CIFAR10(tmp_path, split='train')
    test = CIFAR10(str(folder), split='test')
    assert (len(train), len(test)) == (15, 3)
    assert train.labels[:4] == [0, 1, 2, 1]
    image = train[4]['inputs']
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert image[0, 0, 0].item() == pytest.approx(11 / 255)
    assert image[1].eq(1).all() and image[2].eq(0).all()
    assert train[4]['data_samples'].gt_label.item() == 2
    assert test.metainfo['classes'][0] == 'airplane' and len(test.metainfo['classes']) == 10


def test_missing_file_is_named(tmp_path):
    write_batches(tmp_path)
    (tmp_path / 'data_batch_3').unlink()
    assert len(CIFAR10(tmp_path, split='test')) == 3
    with pytest.raises(FileNotFoundError, match='data_batch_3'):
        CIFAR10(tmp_path, split='train')


def test_refuses_pickles_that_run_code(tmp_path):
    write_batches(tmp_path)
    payload = {'data': np.zeros((1, 3072), np.uint8), 'labels': [print]}
    (tmp_path / 'test_batch').write_bytes(pickle.dumps(payload))
    with pytest.raises(ValueError, match='builtins.print'):
        CIFAR10(tmp_path, split='test')


def test_bad_split_is_named(tmp_path):
    with pytest.raises(ValueError, match='split must be one of'):
        CIFAR10(tmp_path, split='val')


def pickled(**batch):
    return pickle.dumps({key.encode(): value for key, value in batch.items()}, protocol=2)


GOOD = dict(data=np.zeros((2, 3072), np.uint8), labels=[0, 1])


@pytest.mark.parametrize('content, message', [
    pytest.param(b'', r'not a CIFAR-10 python batch \(an empty, truncated or foreign file\?\): '
                 'EOFError', id='empty'),
    pytest.param(pickled(**GOOD)[:-40], 'not a CIFAR-10 python batch .*truncated',
                 id='truncated'),
    pytest.param(pickle.dumps([1, 2]), 'it holds a list, not a dict with data and labels',
                 id='list'),
    pytest.param(pickled(data=GOOD['data'], fine_labels=[0, 1]), r"no \['labels'\] in its keys",
                 id='cifar100'),
    pytest.param(pickled(data=np.zeros((2, 1024), np.uint8), labels=[0, 1]),
                 r'data must be a uint8 array of shape \(N, 3072\).* shape \(2, 1024\)',
                 id='narrow'),
    pytest.param(pickled(data=np.zeros((2, 32, 32, 3), np.uint8), labels=[0, 1]),
                 r'got a uint8 array of shape \(2, 32, 32, 3\)', id='hwc'),
    pytest.param(pickled(data=np.zeros((2, 3072)), labels=[0, 1]),
                 'got a float64 array of shape', id='float'),
    pytest.param(pickled(data=GOOD['data'], labels=[0]),
                 r'2 images but labels of shape \(1,\)', id='few_labels'),
    pytest.param(pickled(data=GOOD['data'], labels=[0, 10]),
                 'labels must be 0 to 9 .*got 0 to 10', id='label_range'),
    pytest.param(pickled(data=GOOD['data'], labels=[0.0, 1.0]), 'labels must be whole numbers',
                 id='float_labels'),
])
def test_a_malformed_batch_is_refused_naming_the_file_and_the_fault(tmp_path, content,
                                                                    message):
    write_batches(tmp_path)
    (tmp_path / 'test_batch').write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        CIFAR10(tmp_path, split='test')
    assert str(tmp_path / 'test_batch') in str(error.value)
