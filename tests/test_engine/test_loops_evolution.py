"""EvolutionSearchLoop: constraints hold, and a killed search resumes to the same end."""
import json

import pytest
from search_helpers import build_runner

from razorlib.engine.loops import EvolutionSearchLoop

LIMITS = dict(flops=30000, params=4000)  # the widest subnet: 51,904 FLOPs, 6,218 params


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


def test_resuming_with_other_settings_names_the_setting(tmp_path):
    evolution(tmp_path, max_epochs=1).val()
    with pytest.raises(ValueError, match='cannot resume: top_k is 3 in the saved search but 2'):
        evolution(tmp_path, top_k=2, resume_from=str(tmp_path / 'search_state.json')).val()


@pytest.mark.parametrize('kwargs, message', [
    (dict(constraints=dict(latency=3)), r'constraints.latency: unknown constraint'),
    (dict(constraints=dict(flops=-1)), r'constraints.flops must be a positive number'),
    (dict(constraints=dict(flops=100)), r'constraints: .* exclude even the narrowest'),
    (dict(top_k=9), r'top_k must be in \[1, num_candidates\], got 9'),
    (dict(num_mutation=4), r'num_mutation must be in \[0, num_candidates - num_crossover\]'),
    (dict(mutate_prob=1.5), r'mutate_prob must be in \[0, 1\]'),
    (dict(score_rule='lower'), r"score_rule must be one of \('greater', 'less'\), got 'lower'"),
])
def test_bad_settings_name_the_key(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evolution(tmp_path, **kwargs).val()
