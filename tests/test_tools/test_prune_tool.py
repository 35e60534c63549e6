"""tools/prune.py on a built-in model: checks pass, files load back into a fresh model."""
import importlib.util
from pathlib import Path

import torch

from razorlib.models import PlainCNN
from razorlib.pruning import slim_model

TOOL = Path(__file__).parents[2] / 'tools' / 'prune.py'


def load_tool():
    spec = importlib.util.spec_from_file_location('prune_tool', TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prune_tool_writes_a_config_and_weights_that_rebuild_the_slim_model(tmp_path):
    tool = load_tool()
    code = tool.main(['--model', 'plain_cnn', '--ratio', '0.5', '--input-size', '16',
                      '--work-dir', str(tmp_path)])
    assert code == 0
    assert (tmp_path / 'prune.log').read_text().count('OK') == 2
    model = slim_model(PlainCNN(num_classes=10), tmp_path / 'channel_cfg.yaml')
    model.load_state_dict(torch.load(tmp_path / 'slim.pth'))
    assert sum(p.numel() for p in model.parameters()) < \
        sum(p.numel() for p in PlainCNN(num_classes=10).parameters())
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 10)
