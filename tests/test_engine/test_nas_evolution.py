"""EvolutionSearchLoop on an SPOS supernet: its constraint check finds the cheapest subnet
of a space whose widths are nested in ops, where the first choices are not it."""
import pytest
from mmengine.runner import Runner
from search_helpers import INPUT_SHAPE, runner_cfg

from razorlib.engine.config import ConfigError
from razorlib.nas import fix_subnet
from razorlib.utils import get_model_complexity

# plain_3x3 has fewer parameters than dyn_7x7 at full width, so it is the op's first
# choice; dyn_7x7 at width 0.125 costs less: 25,168 FLOPs against plain_3x3's 27,552.
ARCHITECTURE = dict(
    type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3),
    backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
                  stem='cifar', last_channels=None, downsample='plain_3x3', candidates=dict(
                      plain_3x3=dict(type='ShuffleBlock', kernel_size=3),
                      dyn_7x7=dict(type='DynamicShuffleBlock', kernel_size=7,
                                   mid_ratios=(0.125, 1.0)))))
OP, WIDTH = 'backbone.stages.0.1', 'backbone.stages.0.1.candidates.dyn_7x7.width'


def search_runner(work_dir, constraints):
    cfg = runner_cfg(work_dir, dict(
        type='EvolutionSearchLoop', max_epochs=1, num_candidates=2, top_k=1, num_mutation=0,
        num_crossover=0, constraints=constraints, recalib_batches=1, val_batches=1))
    cfg['model'] = dict(type='SPOS', architecture=ARCHITECTURE, input_shape=INPUT_SHAPE)
    return Runner(**cfg)


def flops_of(runner, choices):
    fixed = fix_subnet(runner.model.architecture, choices)
    return get_model_complexity(fixed, runner.model.example_inputs()).flops


def test_the_first_choices_are_not_the_cheapest_subnet_here(tmp_path):
    runner = search_runner(tmp_path, dict(flops=26000))
    space = runner.model.search_space
    assert space.min_subnet() == {OP: 'plain_3x3', WIDTH: 0.125}
    assert flops_of(runner, {OP: 'plain_3x3'}) == 27552
    assert flops_of(runner, {OP: 'dyn_7x7', WIDTH: 0.125}) == 25168
    assert flops_of(runner, {OP: 'dyn_7x7', WIDTH: 1.0}) > 27552


def test_a_limit_only_a_nested_width_meets_is_searched_not_refused(tmp_path):
    result = search_runner(tmp_path, dict(flops=26000)).val()
    assert [(r.widths[OP], r.widths[WIDTH], r.flops) for r in result.records] == \
        [('dyn_7x7', 0.125, 25168)]  # the one subnet within the limit


def test_a_limit_below_the_cheapest_subnet_is_refused_naming_the_fewest_flops(tmp_path):
    with pytest.raises(ConfigError, match=r"^constraints: \{'flops': 25000.0\} exclude even the "
                                          r'narrowest subnet: flops <= 25.00k, but the fewest '
                                          r'flops of any subnet are 25.17k$'):
        search_runner(tmp_path, dict(flops=25000)).val()
