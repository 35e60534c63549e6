"""GreedySearchLoop: every target met by the first subnet under it, widths only shrink."""
import pytest
import torch
import yaml
from mmengine.runner import Runner
from search_helpers import ARCHITECTURE, INPUT_SHAPE, build_runner, runner_cfg

from razorlib.engine.config import ConfigError
from razorlib.engine.loops import GreedySearchLoop, SubnetRecord
from razorlib.pruning import slim_model
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity

TARGETS = [40000, 20000, 8000]  # from 51,904 FLOPs (widest) to 6,064 (1 of 4 bins)
SPOS_ARCHITECTURE = dict(
    type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10),
    backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
                  stem='cifar', last_channels=None))


def greedy(tmp_path, **kwargs):
    cfg = dict(type='GreedySearchLoop', target_flops=TARGETS, max_channel_bins=4,
               recalib_batches=1, val_batches=1)
    return build_runner(tmp_path, dict(cfg, **kwargs))


def test_each_target_gets_the_first_subnet_at_or_under_it_and_widths_only_shrink(tmp_path):
    result = greedy(tmp_path).val()
    history = result.history
    assert [h.flops for h in history] == sorted((h.flops for h in history), reverse=True)
    for before, after in zip(history, history[1:]):
        assert all(after.widths[gid] <= width for gid, width in before.widths.items())
    for target in TARGETS:
        record = result.chosen[f'subnet_flops{target}']
        assert record.flops <= target
        assert record is next(h for h in history if h.flops <= target)
    assert len({tuple(r.widths.values()) for r in result.records}) == len(result.records)


def test_the_yaml_of_a_target_slims_a_fresh_model_to_the_recorded_flops(tmp_path):
    result = greedy(tmp_path).val()
    record, path = result.chosen['subnet_flops20000'], result.files['subnet_flops20000']
    assert path == tmp_path / 'subnet_flops20000.yaml' and 'modules' in yaml.safe_load(
        path.read_text())
    slim = slim_model(MODELS.build(ARCHITECTURE), path)
    assert get_model_complexity(slim, torch.randn(1, *INPUT_SHAPE)).flops == record.flops


def test_each_step_keeps_the_candidate_that_scores_best(tmp_path, monkeypatch):
    """Scored so that narrowing the last stage costs most: it is narrowed last."""
    def evaluate(self, widths, tag, full=False):
        flops, params = self.measure(widths)
        cost = sum(w * (10 if gid.endswith('2.conv') else 1) for gid, w in widths.items())
        return SubnetRecord(dict(widths), flops, params, float(cost), tag)

    monkeypatch.setattr(GreedySearchLoop, 'evaluate', evaluate)
    runner = greedy(tmp_path, target_flops=[6100])
    history = runner.val().history
    first_cut = next(i for i, h in enumerate(history) if h.widths['backbone.stages.2.conv'] < 32)
    # the cheap spaces are at one bin of four before the last stage loses any
    assert history[first_cut - 1].widths == {'backbone.stages.0.conv': 2,
                                             'backbone.stages.1.conv': 4,
                                             'backbone.stages.2.conv': 32}


def test_a_target_below_the_narrowest_subnet_names_target_flops(tmp_path):
    with pytest.raises(ValueError, match=r'target_flops: 1.00k is below .* narrowest'):
        greedy(tmp_path, target_flops=[20000, 1000]).val()


@pytest.mark.parametrize('targets', [[], [20000, 20000], [-5]])
def test_bad_targets_name_target_flops(tmp_path, targets):
    with pytest.raises(ValueError, match='target_flops must be distinct positive'):
        greedy(tmp_path, target_flops=targets).val()


def test_ties_on_the_score_go_to_the_lower_tie_break_metric(tmp_path, monkeypatch):
    """Every candidate ties on the score.  Without a tie-break the step takes the fewest
    FLOPs; a tie-break metric that is lowest when stage 0 narrows takes stage 0."""
    def evaluate(self, widths, tag, full=False):
        flops, params = self.measure(widths)
        loss = float(widths['backbone.stages.0.conv'])
        return SubnetRecord(dict(widths), flops, params, 50.0, tag, {'accuracy/nll': loss})

    def first_cut(**kwargs):
        history = greedy(tmp_path, target_flops=[50000], **kwargs).val().history
        return {gid for gid, width in history[1].widths.items()
                if width < history[0].widths[gid]}

    monkeypatch.setattr(GreedySearchLoop, 'evaluate', evaluate)
    assert first_cut() == {'backbone.stages.1.conv'}  # the most FLOPs per bin
    assert first_cut(tie_break_key='accuracy/nll') == {'backbone.stages.0.conv'}


def test_score_rule_less_keeps_the_candidate_with_the_lowest_score(tmp_path, monkeypatch):
    """The score is a loss that is lowest when stage 0 narrows: under ``score_rule='less'``
    each step cuts stage 0 while it can; read as higher-is-better it is cut last."""
    def evaluate(self, widths, tag, full=False):
        flops, params = self.measure(widths)
        loss = float(widths['backbone.stages.0.conv'])
        return SubnetRecord(dict(widths), flops, params, loss, tag, {'accuracy/nll': loss})

    def cuts(**kwargs):
        history = greedy(tmp_path, target_flops=[30000], score_key='accuracy/nll',
                         **kwargs).val().history
        return [next(gid for gid in after.widths if after.widths[gid] < before.widths[gid])
                for before, after in zip(history, history[1:])]

    monkeypatch.setattr(GreedySearchLoop, 'evaluate', evaluate)
    assert cuts(score_rule='less')[:3] == ['backbone.stages.0.conv'] * 3
    assert 'backbone.stages.0.conv' not in cuts()


def test_a_tie_break_key_the_evaluator_does_not_report_is_named(tmp_path):
    with pytest.raises(KeyError, match="tie_break_key 'accuracy/nll' is not among the metrics"):
        greedy(tmp_path, tie_break_key='accuracy/nll').val()


def test_a_real_search_records_accuracy_nll_for_every_subnet(tmp_path):
    runner = greedy(tmp_path, tie_break_key='accuracy/nll',
                    evaluator=dict(type='Accuracy', topk=1, nll=True))
    result = runner.val()
    assert all('accuracy/nll' in record.metrics for record in result.records)


def test_a_supernet_without_a_pruner_is_refused_naming_it(tmp_path):
    cfg = runner_cfg(tmp_path, dict(type='GreedySearchLoop', target_flops=TARGETS,
                                    recalib_batches=1, val_batches=1))
    cfg['model'] = dict(type='SPOS', input_shape=INPUT_SHAPE, architecture=SPOS_ARCHITECTURE)
    with pytest.raises(ValueError, match=r'^model: GreedySearchLoop slims the channel widths '
                       r'of a channel-width supernet \(AutoSlim, with a pruner\); SPOS has no '
                       'pruner: search its op and value choices with EvolutionSearchLoop'):
        Runner(**cfg).val()


def test_a_search_under_an_ema_that_swaps_the_masks_is_refused_before_any_candidate(
        tmp_path, monkeypatch):
    # EMAHook(update_buffers=True) swaps its copy's masks in before each validation epoch:
    # every candidate would score as that copy's subnet
    cfg = runner_cfg(tmp_path, dict(type='GreedySearchLoop', target_flops=TARGETS,
                                    max_channel_bins=4, recalib_batches=1, val_batches=1))
    cfg['custom_hooks'] = [dict(type='EMAHook', update_buffers=True)]
    scored = []
    monkeypatch.setattr(GreedySearchLoop, 'evaluate', lambda self, *args: scored.append(args))
    with pytest.raises(ConfigError, match=r"^custom_hooks: EMAHook\(update_buffers=True\) .* "
                                          "GreedySearchLoop would validate the copy's subnet"):
        Runner(**cfg).val()
    assert scored == []
