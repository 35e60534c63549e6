"""tools/train.py, tools/prune.py and tools/test.py refuse a model whose input_shape is not
the size of the images of its config, as tools/search.py does
(tests/test_tools/test_search_input_shape.py): the FLOPs and params they log, and the FLOPs
targets a pruning run prunes to, are counted on a 1 x input_shape batch, so with another
size they would be those of other images."""
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import TINY, LogCapture, load_tool
from razorlib.registry import MODELS

WRONG = 'model.input_shape=(3,32,32)'
SAID = ('model.input_shape: (3, 32, 32), but the {key} gives images of (3, 16, 16) (after '
        'the data preprocessor): ')


def test_train_refuses_an_input_shape_other_than_the_training_images(tmp_path, monkeypatch):
    # trained on 16x16 digits, flops_M was logged at 32x32: 4x the model's own
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    work_dir = tmp_path / 'new' / 'train'
    assert tool.main([str(TINY), '--work-dir', str(work_dir), '--cfg-options', WRONG,
                      f'experiment_name=shape_{tmp_path.name}']) == 2
    assert len(log.messages) == 1
    assert log.messages[0].startswith(f'{TINY}: ' + SAID.format(key='train_dataloader')
                                      + 'the FLOPs and params its FLOPs/params targets')
    assert log.messages[0].endswith('set model.input_shape=(3, 16, 16)')
    assert not (tmp_path / 'new').exists()


def subnet_file(tiny_supernet, path):
    """The widest subnet of the tiny supernet, as a --subnet file."""
    init_default_scope('razorlib')
    supernet = MODELS.build(Config.fromfile(TINY).model)
    supernet.load_state_dict(torch.load(tiny_supernet)['state_dict'])
    supernet.export_subnet().dump(path)
    return str(path)


def test_prune_refuses_an_input_shape_other_than_the_images(
        tiny_supernet, tmp_path, monkeypatch):
    # the slim model's FLOPs were logged at 32x32 (4x those of the 16x16 digits)
    tool = load_tool('prune')
    log = LogCapture(tool, monkeypatch)
    subnet = subnet_file(tiny_supernet, tmp_path / 'subnet.yaml')
    args = [str(TINY), str(tiny_supernet), '--subnet', subnet, '--recalib-batches', '0']
    assert tool.main([*args, '--work-dir', str(tmp_path / 'new' / 'out'),
                      '--cfg-options', WRONG]) == 2
    assert len(log.messages) == 1
    assert log.messages[0] == f'{TINY}: ' + SAID.format(key='val_dataloader') + (
        'the FLOPs and params logged for the dense and slim models are counted on a 1 x '
        'input_shape batch, so they would be those of other images; set '
        'model.input_shape=(3, 16, 16)')
    assert not (tmp_path / 'new').exists()
    assert tool.main([*args, '--work-dir', str(tmp_path / 'ok')]) == 0
    assert (tmp_path / 'ok' / 'slim.pth').is_file()


def test_test_refuses_an_input_shape_other_than_the_test_images(
        tiny_supernet, tmp_path, monkeypatch):
    # ResourceEstimatorHook logged the tested model's flops_M at 32x32 beside its metrics
    tool = load_tool('test')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), str(tiny_supernet), '--work-dir', str(tmp_path / 'new' / 'w'),
                      '--cfg-options', WRONG]) == 2
    assert log.messages == [f'{TINY}: ' + SAID.format(key='test_dataloader') + (
        'the FLOPs and params ResourceEstimatorHook logs are counted on a 1 x input_shape '
        'batch, so they would be those of other images; set model.input_shape=(3, 16, 16)')]
    assert not (tmp_path / 'new').exists()
