"""EvolutionSearchLoop: constraints hold, and a killed search resumes to the same end."""
import json
import math

import pytest
from mmengine.runner import Runner
from search_helpers import build_runner, runner_cfg

from razorlib.engine.loops import EvolutionSearchLoop, SubnetRecord, SubnetValLoop, pareto_front

LIMITS = dict(flops=30000, params=4000)  # the widest subnet: 51,904 FLOPs, 6,218 params
NAN = float('nan')


def evolution(work_dir, **kwargs):
    cfg = dict(type='EvolutionSearchLoop', max_epochs=3, num_candidates=5, top_k=3,
               num_mutation=2, num_crossover=2, mutate_prob=0.5, constraints=LIMITS,
               recalib_batches=1, val_batches=1)
    return build_runner(work_dir, dict(cfg, **kwargs))


def test_every_candidate_meets_the_constraints_and_the_best_never_worsens(tmp_path):
    result = evolution(tmp_path).val()
    assert len(result.records) == 15
    assert all(r.flops <= LIMITS['flops'] and r.params <= LIMITS['params']
               for r in result.records)
    assert len({tuple(r.widths.values()) for r in result.records}) == 15
    scores = [h.score for h in result.history]
    assert len(scores) == 3 and scores == sorted(scores)
    best = result.chosen['best_subnet']
    assert best.score == max(r.score for r in result.records)
    assert result.files['best_subnet'].is_file()
    state = json.loads((tmp_path / 'search_state.json').read_text())
    assert state['generation'] == 3 and len(state['records']) == 15


def test_a_search_killed_in_a_generation_resumes_to_exactly_the_uninterrupted_result(
        tmp_path, monkeypatch):
    whole = evolution(tmp_path / 'whole').val()

    calls = []
    evaluate = EvolutionSearchLoop.evaluate

    def dies_in_generation_2(self, widths, tag, full=False):
        calls.append(tag)
        if len(calls) > 2 * 5 + 1:
            raise KeyboardInterrupt
        return evaluate(self, widths, tag, full)

    monkeypatch.setattr(EvolutionSearchLoop, 'evaluate', dies_in_generation_2)
    with pytest.raises(KeyboardInterrupt):
        evolution(tmp_path / 'killed').val()
    state_path = tmp_path / 'killed' / 'search_state.json'
    assert json.loads(state_path.read_text())['generation'] == 2
    monkeypatch.undo()

    resumed = evolution(tmp_path / 'killed', resume_from=str(state_path)).val()
    assert resumed.records == whole.records
    assert resumed.history == whole.history
    assert json.loads(state_path.read_text()) == \
        json.loads((tmp_path / 'whole' / 'search_state.json').read_text())
    assert resumed.files['best_subnet'].read_text() == whole.files['best_subnet'].read_text()


@pytest.mark.parametrize('changed, message', [
    (dict(top_k=2), 'top_k is 3 in the saved search but 2'),
    (dict(fp16=True), 'fp16 is False in the saved search but True'),  # other scores
    (dict(max_trials=1), 'max_trials is 100 in the saved search but 1'),  # other draws
])
def test_resuming_with_other_settings_names_the_setting(tmp_path, changed, message):
    evolution(tmp_path, max_epochs=1).val()
    with pytest.raises(ValueError, match=f'cannot resume: {message}'):
        evolution(tmp_path, resume_from=str(tmp_path / 'search_state.json'), **changed).val()


@pytest.mark.parametrize('kwargs, message', [
    (dict(constraints=dict(latency=3)), r'constraints.latency: unknown constraint'),
    (dict(constraints=dict(flops=-1)), r'constraints.flops must be a positive number'),
    # True was a limit of 1.0 FLOPs, which no subnet meets; NaN one no subnet is below
    (dict(constraints=dict(flops=True)), r'constraints.flops must be a positive number, '
     r'got True$'),
    (dict(constraints=dict(params=NAN)), r'constraints.params must be a positive number, '
     r'got nan$'),
    (dict(constraints=[30000]), r"constraints must be a dict of limits \('flops', "
     r"'params'\), got \[30000\]$"),
    (dict(constraints=dict(flops=100)), r'constraints: .* exclude even the narrowest'),
    (dict(top_k=9), r'top_k must be in \[1, num_candidates\], got 9'),
    (dict(num_mutation=4), r'num_mutation must be in \[0, num_candidates - num_crossover\]'),
    (dict(mutate_prob=1.5), r'mutate_prob must be in \[0, 1\]'),
    (dict(score_rule='lower'), r"score_rule must be one of \('greater', 'less'\), got 'lower'"),
])
def test_bad_settings_name_the_key(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evolution(tmp_path, **kwargs).val()


@pytest.mark.parametrize('rule', ['greater', 'less'])
@pytest.mark.parametrize('scores', [[1.0, NAN, 0.5, 2.0], [NAN, 1.0, 0.5, 2.0]])
def test_a_nan_score_ranks_below_every_number(tmp_path, rule, scores):
    loop = evolution(tmp_path, top_k=3, score_rule=rule).val_loop
    loop.records = [SubnetRecord({'a': i}, 100, 10, s) for i, s in enumerate(scores)]
    expected = [2.0, 1.0, 0.5] if rule == 'greater' else [0.5, 1.0, 2.0]
    assert [r.score for r in loop.best()] == expected
    nan_record = next(r for r in loop.records if math.isnan(r.score))
    assert all(loop.rank(nan_record) < loop.rank(r) for r in loop.records if r is not nan_record)
    front = pareto_front([SubnetRecord({}, 1, 1, NAN)] + loop.records, rule)
    assert [r.score for r in front] == [expected[0]]  # the NaN of fewest FLOPs hides none


def test_a_search_never_chooses_a_nan_scored_subnet_and_warns_naming_it(tmp_path, monkeypatch):
    validate = SubnetValLoop.validate
    calls = []

    def first_diverges(self, subnet, max_batches=None):
        metrics = validate(self, subnet, max_batches)
        calls.append(subnet)
        return dict(metrics, **{'accuracy/top1': NAN}) if len(calls) == 1 else metrics

    monkeypatch.setattr(SubnetValLoop, 'validate', first_diverges)
    runner = evolution(tmp_path, max_epochs=1)
    warnings = []
    monkeypatch.setattr(runner.logger, 'warning', warnings.append)
    result = runner.val()
    diverged = result.records[0]
    assert math.isnan(diverged.score)
    best = result.chosen['best_subnet']
    assert best.score == max(r.score for r in result.records[1:])
    assert [w for w in warnings if 'accuracy/top1 is NaN for the subnet' in w] == [
        f'generation 0: accuracy/top1 is NaN for the subnet {diverged.widths}; it ranks '
        'below every scored subnet']


@pytest.mark.parametrize('key, edit, digest', [
    ('val_dataloader', dict(batch_size=15), 'val_data'),
    ('train_dataloader', dict(batch_size=8), 'calib_data'),
])
def test_resuming_on_other_data_is_refused(tmp_path, key, edit, digest):
    evolution(tmp_path, max_epochs=1).val()
    cfg = runner_cfg(tmp_path, dict(type='EvolutionSearchLoop', max_epochs=2, num_candidates=5,
                                    top_k=3, num_mutation=2, num_crossover=2, mutate_prob=0.5,
                                    constraints=LIMITS, recalib_batches=1, val_batches=1,
                                    resume_from=str(tmp_path / 'search_state.json')))
    cfg[key] = dict(cfg[key], **edit)
    with pytest.raises(ValueError, match=f"cannot resume: {digest} is 'sha256:[0-9a-f]{{16}}' "
                                         'in the saved search but '):
        Runner(**cfg).val()


def test_a_darts_supernet_is_refused_naming_the_algorithm(tmp_path):
    cfg = runner_cfg(tmp_path, dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=2,
                                    top_k=1, num_mutation=0, num_crossover=0))
    cfg['model'] = dict(type='DARTS', input_shape=(3, 8, 8), architecture=dict(
        type='ImageClassifier', backbone=dict(
            type='SearchableShuffleNetV2', arch_setting=[(16, 1, 2)], stem_channels=8,
            stem='cifar', last_channels=None, mutable_cfg=dict(type='DiffMutableOP')),
        head=dict(type='LinearClsHead', num_classes=10)))
    with pytest.raises(ValueError, match='^model: EvolutionSearchLoop cannot search a DARTS '
                                         'supernet: a DARTS subnet is derived by argmax'):
        Runner(**cfg).val()
