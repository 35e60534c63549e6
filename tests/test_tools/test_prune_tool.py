"""tools/prune.py: a built-in model, or a trained supernet sliced to a subnet file."""
import random

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from conftest import TINY, load_tool
from razorlib.models import PlainCNN
from razorlib.pruning import slim_model
from razorlib.registry import MODELS


def test_prune_tool_writes_a_config_and_weights_that_rebuild_the_slim_model(tmp_path):
    code = load_tool('prune').main(['--model', 'plain_cnn', '--ratio', '0.5',
                                    '--input-size', '16', '--work-dir', str(tmp_path)])
    assert code == 0
    assert (tmp_path / 'prune.log').read_text().count('OK') == 2
    model = slim_model(PlainCNN(num_classes=10), tmp_path / 'channel_cfg.yaml')
    model.load_state_dict(torch.load(tmp_path / 'slim.pth'))
    assert sum(p.numel() for p in model.parameters()) < \
        sum(p.numel() for p in PlainCNN(num_classes=10).parameters())
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 10)


def build_supernet(checkpoint):
    cfg = Config.fromfile(TINY)
    init_default_scope('razorlib')
    supernet = MODELS.build(cfg.model)
    supernet.load_state_dict(torch.load(checkpoint)['state_dict'])
    return cfg, supernet.eval()


def test_a_supernet_subnet_becomes_a_slim_model_without_the_supernet(tiny_supernet, tmp_path):
    cfg, supernet = build_supernet(tiny_supernet)
    supernet.set_subnet(supernet.sample_subnet(random.Random(2)))
    supernet.export_subnet().dump(tmp_path / 'subnet.yaml')
    out = tmp_path / 'pruned'
    code = load_tool('prune').main([str(TINY), str(tiny_supernet), '--subnet',
                                    str(tmp_path / 'subnet.yaml'), '--work-dir', str(out)])
    assert code == 0
    assert (out / 'prune.log').read_text().count('OK') == 2
    # rebuilt from the plain architecture config: no AutoSlim, no pruner, no masks
    slim = slim_model(MODELS.build(cfg.model.architecture), out / 'channel_cfg.yaml').eval()
    slim.load_state_dict(torch.load(out / 'slim.pth'))
    assert not any('mask' in name for name in slim.state_dict())
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(slim(x), supernet.architecture(x), atol=1e-5)
    assert slim.backbone.stages[1].conv.out_channels < 16


def test_a_bad_subnet_file_is_reported_with_its_key(tiny_supernet, tmp_path):
    (tmp_path / 'subnet.yaml').write_text(
        'version: 1\nmodules:\n  backbone.stages.0.conv: {out_channels: 4}\n')
    code = load_tool('prune').main([str(TINY), str(tiny_supernet), '--subnet',
                                    str(tmp_path / 'subnet.yaml'), '--work-dir', str(tmp_path)])
    assert code == 2
    assert "modules.backbone.stages.0.conv: missing key 'raw_out_channels'" in \
        (tmp_path / 'prune.log').read_text()


def test_config_mode_needs_a_checkpoint_and_a_subnet(tmp_path):
    assert load_tool('prune').main([str(TINY), '--work-dir', str(tmp_path)]) == 2
    assert 'needs CHECKPOINT and --subnet' in (tmp_path / 'prune.log').read_text()
