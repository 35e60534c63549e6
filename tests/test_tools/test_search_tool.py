"""tools/search.py: YAMLs, results JSON, plot and table; resume; errors name the bad key."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from search_helpers import build_runner, one_thread, runner_cfg  # noqa: F401 (fixture)

from razorlib.engine.loops import SubnetRecord

TOOL = Path(__file__).parents[2] / 'tools' / 'search.py'
GREEDY = dict(type='GreedySearchLoop', target_flops=[40000, 20000, 8000], max_channel_bins=4,
              recalib_batches=1, val_batches=1)
EVOLUTION = dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=4, top_k=2,
                 num_mutation=1, num_crossover=1, constraints=dict(flops=30000),
                 recalib_batches=1, val_batches=1)


def load_tool():
    spec = importlib.util.spec_from_file_location('search_tool', TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """A supernet checkpoint and a search config writer."""
    root = tmp_path_factory.mktemp('search_tool')
    checkpoint = root / 'supernet.pth'
    torch.save(dict(state_dict=build_runner(root / 'init').model.state_dict()), checkpoint)

    def config(name, search_cfg):
        cfg = runner_cfg(root / 'unused')
        cfg.pop('val_cfg')
        if search_cfg is not None:
            cfg['search_cfg'] = search_cfg
        path = root / f'{name}.py'
        Config(cfg).dump(path)
        return str(path)

    return checkpoint, config


def run(files, search_cfg, work_dir, *extra):
    checkpoint, config = files
    return load_tool().main([config('search', search_cfg), str(checkpoint), '--work-dir',
                             str(work_dir), '--cfg-options', 'log_level=INFO', *extra])


def test_greedy_search_writes_subnets_results_plot_and_a_table(files, tmp_path):
    assert run(files, GREEDY, tmp_path) == 0
    for target in GREEDY['target_flops']:
        assert (tmp_path / f'subnet_flops{target}.yaml').is_file()
    results = json.loads((tmp_path / 'search_results.json').read_text())
    assert results['search'] == 'GreedySearchLoop' and results['records']
    assert all({'flops', 'params', 'score', 'widths'} <= set(r) for r in results['records'])
    assert len(results['uniform']) == len(results['uniform_full_val']) == 11
    chosen = results['chosen']['subnet_flops20000']
    assert chosen['full_val']['flops'] == chosen['search']['flops'] <= 20000
    assert (tmp_path / 'search_plot.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert 'chosen subnets vs uniform widths (whole validation set)' in log
    assert 'subnet_flops8000' in log and 'uniform x' in log


def test_the_table_compares_with_the_nearest_width_and_the_curve_at_equal_flops():
    tool = load_tool()
    uniform = [SubnetRecord({}, 100, 1, 60.0, 'uniform x0.50'),
               SubnetRecord({}, 300, 1, 80.0, 'uniform x1.00')]
    assert tool.uniform_at(uniform, 150) == 65.0
    header, row = tool.comparison_table({'s': SubnetRecord({}, 150, 1, 70.0)}, uniform,
                                        'top1')
    assert row.split() == ['s', '150', '1', '70.00', '|', 'uniform', 'x0.50', '100', '60.00',
                           '|', '65.00', '+5.00']


def test_resume_continues_an_evolution_search(files, tmp_path):
    assert run(files, EVOLUTION, tmp_path) == 0
    assert run(files, EVOLUTION, tmp_path, 'search_cfg.max_epochs=2', '--resume') == 0
    results = json.loads((tmp_path / 'search_results.json').read_text())
    assert len(results['records']) == 8 and len(results['history']) == 2
    assert all(r['flops'] <= 30000 for r in results['records'])
    assert (tmp_path / 'best_subnet.yaml').is_file()


@pytest.mark.parametrize('search_cfg, extra, error, message', [
    (None, (), ValueError, "the config has no 'search_cfg'"),
    (dict(type='ValLoop'), (), ValueError, "search_cfg.type must name a search loop"),
    (GREEDY, ('search_cfg.target_flops=[10]', ), ValueError, 'target_flops: 10 is below'),
    (GREEDY, ('--resume', ), ValueError, '--resume: GreedySearchLoop does not checkpoint'),
    (EVOLUTION, ('search_cfg.constraints.latency=3', ), ValueError, 'constraints.latency'),
])
def test_errors_name_the_key_at_fault(files, tmp_path, search_cfg, extra, error, message):
    with pytest.raises(error, match=message):
        run(files, search_cfg, tmp_path, *extra)


def test_a_missing_checkpoint_is_named(files, tmp_path):
    _, config = files
    with pytest.raises(FileNotFoundError, match='checkpoint: no such file'):
        load_tool().main([config('search', GREEDY), str(tmp_path / 'none.pth')])
