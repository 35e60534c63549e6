"""The search loops and SubnetValLoop refuse a count given as a float, a string or a bool,
naming the setting, when they are built: it failed inside range(), islice() or a slice,
with a traceback naming nothing (top_k=4.0 only after a generation was scored)."""
import pytest
from search_helpers import build_runner

from razorlib.engine.config import ConfigError

EVOLUTION = dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=4, top_k=2,
                 num_mutation=1, num_crossover=1, mutate_prob=0.5,
                 constraints=dict(flops=30000), recalib_batches=1, val_batches=1)
GREEDY = dict(type='GreedySearchLoop', target_flops=[30000], max_channel_bins=4,
              recalib_batches=1, val_batches=1)
SUBNET_VAL = dict(type='SubnetValLoop', subnet=None, recalib_batches=1)


@pytest.mark.parametrize('loop, setting, message', [
    (EVOLUTION, dict(top_k=2.0), r'^top_k must be an integer, got 2.0 \(a float\)$'),
    (EVOLUTION, dict(max_epochs=2.5), r'^max_epochs must be an integer, got 2.5 \(a float\)$'),
    (EVOLUTION, dict(num_candidates='4'), r"^num_candidates must be an integer, got '4' "
     r'\(a str\)$'),
    (EVOLUTION, dict(num_mutation=True), r'^num_mutation must be an integer, got True '
     r'\(a bool\)$'),
    (EVOLUTION, dict(mutate_prob='0.5'), r"^mutate_prob must be a number in \[0, 1\], "
     r"got '0.5'$"),
    (EVOLUTION, dict(recalib_batches=1.5), r'^recalib_batches must be an integer, got 1.5'),
    (EVOLUTION, dict(val_batches=2.0), r'^val_batches must be an integer, got 2.0'),
    (GREEDY, dict(max_channel_bins=4.5), r'^max_channel_bins must be an integer, got 4.5'),
    (GREEDY, dict(target_flops=30000.0), r'^target_flops must be a list of FLOPs counts, '
     r'e.g. \[1.2e6\], got 30000.0$'),
    (GREEDY, dict(target_flops='30000'), r"^target_flops must be a list of FLOPs counts, "
     r"e.g. \[1.2e6\], got '30000'$"),
    (GREEDY, dict(target_flops=[30000, None]), r'^target_flops must be a list of FLOPs '
     r'counts, e.g. \[1.2e6\], got \[30000, None\]$'),
    (SUBNET_VAL, dict(recalib_batches=8.0), r'^recalib_batches must be an integer, got 8.0'),
    (SUBNET_VAL, dict(max_batches='2'), r"^max_batches must be an integer, got '2'"),
])
def test_a_count_that_is_no_integer_is_refused_naming_it(tmp_path, loop, setting, message):
    runner = build_runner(tmp_path, dict(loop, **setting))
    with pytest.raises(ConfigError, match=message):
        runner.val_loop


@pytest.mark.parametrize('loop', [EVOLUTION, GREEDY, SUBNET_VAL])
def test_integer_settings_build(tmp_path, loop):
    assert type(build_runner(tmp_path, loop).val_loop).__name__ == loop['type']
