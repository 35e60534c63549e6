"""The search loops call the hook stages in order, score through SubnetValLoop, leave the
global generators alone, and DumpSubnetHook writes the chosen YAMLs and one results JSON."""
import json
import random

import numpy as np
import torch
from search_helpers import build_runner

from razorlib.engine.hooks import SEARCH_STAGES, DumpSubnetHook, SearchHook
from razorlib.pruning import ChannelConfig

GREEDY = dict(type='GreedySearchLoop', target_flops=[40000, 20000], max_channel_bins=4,
              recalib_batches=1, val_batches=2)
EVOLUTION = dict(type='EvolutionSearchLoop', max_epochs=2, num_candidates=3, top_k=2,
                 num_mutation=1, num_crossover=1, constraints=dict(flops=30000),
                 recalib_batches=1, val_batches=1)


class Recorder(SearchHook):
    """Records every stage it sees (mmengine's validation stages and the search's)."""

    def __init__(self):
        self.calls = []

    def before_val(self, runner):
        self.calls.append(('before_val', ))

    def before_val_epoch(self, runner):
        self.calls.append(('before_val_epoch', ))

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.calls.append(('after_val_iter', batch_idx))

    def after_val_epoch(self, runner, metrics=None):
        self.calls.append(('after_val_epoch', metrics['accuracy/top1']))

    def after_val(self, runner):
        self.calls.append(('after_val', ))

    def before_search(self, runner):
        self.calls.append(('before_search', ))

    def after_search_candidate(self, runner, record):
        self.calls.append(('after_search_candidate', record))

    def after_search_step(self, runner, step, best):
        self.calls.append(('after_search_step', step, best))

    def after_search(self, runner, result):
        self.calls.append(('after_search', result))


def run(tmp_path, search_cfg):
    runner = build_runner(tmp_path, search_cfg)
    recorder = Recorder()
    runner.register_hook(recorder)
    return runner.val(), recorder.calls


def names(calls):
    return [call[0] for call in calls]


def test_greedy_calls_the_stages_in_order_and_scores_each_candidate_as_a_val_epoch(tmp_path):
    result, calls = run(tmp_path, GREEDY)
    assert names(calls[:2]) == ['before_val', 'before_search']
    assert names(calls[-2:]) == ['after_search', 'after_val'] and calls[-2][1] is result
    candidates = [call[1] for call in calls if call[0] == 'after_search_candidate']
    assert candidates == result.records
    # each candidate: one validation epoch of val_batches iterations (SubnetValLoop.validate)
    epoch = ['before_val_epoch', 'after_val_iter', 'after_val_iter', 'after_val_epoch',
             'after_search_candidate']
    body = [name for name in names(calls[2:-2]) if name != 'after_search_step']
    assert body == epoch * len(result.records)
    for index, call in enumerate(calls):
        if call[0] == 'after_search_candidate':
            assert calls[index - 1] == ('after_val_epoch', call[1].score)
    steps = [call for call in calls if call[0] == 'after_search_step']
    assert [step for _, step, _ in steps] == list(range(len(result.history)))
    assert [best for _, _, best in steps] == result.history


def test_evolution_calls_after_search_step_once_per_generation(tmp_path):
    result, calls = run(tmp_path, EVOLUTION)
    steps = [call for call in calls if call[0] == 'after_search_step']
    assert [step for _, step, _ in steps] == [0, 1]
    assert [best for _, _, best in steps] == result.history
    assert names(calls).count('after_search_candidate') == len(result.records) == 6


def test_dump_subnet_hook_writes_each_chosen_yaml_and_one_results_json(tmp_path):
    result, _ = run(tmp_path, GREEDY)
    results = json.loads((tmp_path / 'search_results.json').read_text())
    assert results['search'] == 'GreedySearchLoop' and results['val_batches'] == 2
    assert set(results['chosen']) == {'subnet_flops40000', 'subnet_flops20000'}
    for name, entry in results['chosen'].items():
        record = result.chosen[name]
        assert entry['file'] == f'{name}.yaml' and result.files[name] == tmp_path / entry['file']
        assert entry['limits'] == {'flops': float(name[len('subnet_flops'):])}
        assert (entry['flops'], entry['params'], entry['score']) == \
            (record.flops, record.params, record.score)
        assert entry['metrics'] == record.metrics and entry['flops'] <= entry['limits']['flops']
        assert ChannelConfig.load(tmp_path / entry['file']) == result.configs[name]
    assert len(results['records']) == len(result.records) and results['history']
    # the candidates' validation epochs wrote nothing
    assert not (tmp_path / 'subnet_latest.yaml').exists()


def test_the_evolution_results_json_gives_its_constraints_as_limits(tmp_path):
    run(tmp_path, EVOLUTION)
    entry = json.loads((tmp_path / 'search_results.json').read_text())['chosen']['best_subnet']
    assert entry['limits'] == {'flops': 30000.0} and entry['flops'] <= 30000
    assert (tmp_path / entry['file']).is_file()


def test_a_search_draws_nothing_from_the_global_generators(tmp_path):
    """The Runner seeds the global generators when it is built (mmengine's
    ``randomness``); whatever they hold afterwards, the search draws its candidates
    from its own ``random.Random(seed)`` and recalibrates under a seeded, restored
    state, so it finds the same subnets with the same scores."""
    results = []
    for global_seed in (1, 2):
        runner = build_runner(tmp_path / str(global_seed), EVOLUTION)
        random.seed(global_seed), np.random.seed(global_seed), torch.manual_seed(global_seed)
        python_state, numpy_state = random.getstate(), np.random.get_state()[1].copy()
        results.append(runner.val())
        assert random.getstate() == python_state
        assert (np.random.get_state()[1] == numpy_state).all()
    assert results[0].records == results[1].records


def test_the_search_stages_are_named_once():
    assert SearchHook().search_stages() == []
    assert DumpSubnetHook().search_stages() == ['before_search', 'after_search']
    assert set(Recorder().search_stages()) == set(SEARCH_STAGES)
