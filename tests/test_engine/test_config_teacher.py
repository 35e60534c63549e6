"""check_config names the key of a mistake in a distiller's teacher config, as it names
one in its student's (``model.architecture...``)."""
from pathlib import Path

import pytest

from razorlib.engine.config import ConfigError, check_config, load_config

DISTILL = Path(__file__).parents[2] / 'configs' / 'pruning' / 'distill' / \
    'distill_plaincnn_digits.py'


@pytest.fixture
def cfg():
    return load_config(DISTILL)


def test_the_distill_config_passes(cfg):
    check_config(cfg)


@pytest.mark.parametrize('options, message', [
    ({'model.teacher.backbone.type': 'PlainCN'},
     r"model\.teacher\.backbone\.type: 'PlainCN' is not registered in the model registry"),
    ({'model.teacher.backbone.chanels': (8, 16)},
     r"model\.teacher\.backbone\.chanels: PlainCNN takes no argument 'chanels' \(closest: "
     r'channels, in_channels\)'),
    ({'model.teacher.head.num_clases': 10},
     r"model\.teacher\.head\.num_clases: LinearClsHead takes no argument 'num_clases'"),
])
def test_a_teacher_mistake_is_reported_with_its_key(cfg, options, message):
    # the teacher was not walked: these failed only when the model was built, as
    # "model: PlainCN is not in the razorlib::model registry", naming no key
    cfg.merge_from_dict(options)
    with pytest.raises(ConfigError, match=f'^{message}'):
        check_config(cfg)
