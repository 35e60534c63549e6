"""tools/search.py: YAMLs, results JSON, plot and table; resume, overwrite and Ctrl-C;
errors name the bad key."""
import itertools
import json
import shlex
from pathlib import Path

import pytest
import torch
from conftest import REPO, TINY, LogCapture, load_tool
from mmengine.config import Config
from mmengine.registry import init_default_scope

from razorlib.engine.config import ConfigError, check_config, load_config
from razorlib.engine.loops import SubnetRecord
from razorlib.registry import MODELS

# The tiny supernet spans 132k FLOPs (whole) to 19k (1 of 4 bins per space).
GREEDY = dict(type='GreedySearchLoop', target_flops=[100000, 60000, 30000],
              max_channel_bins=4, recalib_batches=1)
EVOLUTION = dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=4, top_k=2,
                 num_mutation=1, num_crossover=1, constraints=dict(flops=60000),
                 recalib_batches=1)


PANEL_WIDTH = 7 * 120  # pixels: 7 inches at 120 dpi


def png_width(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], 'big')


def search_config(path: Path, search_cfg) -> str:
    """A search config on top of the tiny supernet config (no hooks: the tool adds the
    DumpSubnetHook)."""
    lines = [f'_base_ = [{str(TINY)!r}]', 'custom_hooks = []']
    if search_cfg is not None:
        lines.append(f'search_cfg = {search_cfg!r}')
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


#: A number per run: runs in one process that share an experiment name share the Runner's
#: logger and visualizer, which would write into the log folder a refused run removed.
RUNS = itertools.count()


def run(tool, checkpoint, search_cfg, work_dir, *extra) -> int:
    config = search_config(work_dir.parent / f'{work_dir.name}_search.py', search_cfg)
    options = ['--cfg-options', f'experiment_name=search_{work_dir.name}_{next(RUNS)}', *extra]
    return tool.main([config, str(checkpoint), '--work-dir', str(work_dir), *options])


def test_greedy_search_writes_subnets_results_plot_and_a_table(tiny_supernet, tmp_path):
    assert run(load_tool('search'), tiny_supernet, GREEDY, tmp_path / 'greedy') == 0
    work_dir = tmp_path / 'greedy'
    for target in GREEDY['target_flops']:
        assert (work_dir / f'subnet_flops{target}.yaml').is_file()
    results = json.loads((work_dir / 'search_results.json').read_text())
    assert results['search'] == 'GreedySearchLoop' and results['records']
    assert all({'flops', 'params', 'score', 'widths'} <= set(r) for r in results['records'])
    assert len(results['uniform']) == 11 and results['uniform_full_val'] == results['uniform']
    chosen = results['chosen']['subnet_flops60000']
    assert chosen['file'] == 'subnet_flops60000.yaml' and chosen['limits'] == {'flops': 60000}
    assert results['chosen_full_val']['subnet_flops60000']['flops'] == chosen['flops'] <= 60000
    assert (work_dir / 'search_plot.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert png_width(work_dir / 'search_plot.png') == PANEL_WIDTH  # top-1 only
    log = next(work_dir.glob('*/*.log')).read_text()
    assert 'chosen subnets vs uniform widths (whole validation set)' in log
    assert 'subnet_flops30000' in log and 'uniform x' in log


def test_an_earlier_search_is_replaced_only_with_overwrite_and_leaves_no_stale_subnet(
        tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('search')
    work_dir = tmp_path / 'greedy'
    assert run(tool, tiny_supernet, GREEDY, work_dir) == 0
    results = work_dir / 'search_results.json'
    written = results.read_text()
    log = LogCapture(tool, monkeypatch)
    fewer = dict(GREEDY, target_flops=[60000])
    assert run(tool, tiny_supernet, fewer, work_dir) == 2
    assert f'{results}: a search wrote its results here; pass --overwrite to replace them' \
        in log.text
    assert results.read_text() == written
    assert run(tool, tiny_supernet, fewer, work_dir, '--overwrite') == 0
    assert sorted(path.name for path in work_dir.glob('*.yaml')) == ['subnet_flops60000.yaml']
    assert list(json.loads(results.read_text())['chosen']) == ['subnet_flops60000']


def test_a_search_ranked_by_a_loss_plots_and_tabulates_it_beside_top1(tiny_supernet, tmp_path):
    work_dir = tmp_path / 'nll'
    greedy = dict(GREEDY, score_key='accuracy/nll', score_rule='less')
    assert run(load_tool('search'), tiny_supernet, greedy, work_dir,
               'val_evaluator.nll=True') == 0
    results = json.loads((work_dir / 'search_results.json').read_text())
    assert results['score_key'] == 'accuracy/nll' and results['score_rule'] == 'less'
    front = [r['score'] for r in results['pareto_front']]
    assert len(front) > 1 and front == sorted(front, reverse=True)  # more FLOPs, lower loss
    assert all(r['score'] == r['metrics']['accuracy/nll'] for r in results['records'])
    # one panel per metric: the loss the search ranked by, and top-1
    assert png_width(work_dir / 'search_plot.png') == 2 * PANEL_WIDTH
    log = next(work_dir.glob('*/*.log')).read_text()
    assert 'accuracy/nll  | nearest uniform' in log and 'accuracy/top1  | nearest uniform' in log


def test_the_table_compares_with_the_nearest_width_and_the_curve_at_equal_flops():
    tool = load_tool('search')
    uniform = [SubnetRecord({}, 100, 1, 60.0, 'uniform x0.50', {'top1': 60.0, 'nll': 0.4}),
               SubnetRecord({}, 300, 1, 80.0, 'uniform x1.00', {'top1': 80.0, 'nll': 0.2})]
    assert tool.uniform_at(uniform, 150) == 65.0
    chosen = {'s': SubnetRecord({}, 150, 1, 70.0, '', {'top1': 70.0, 'nll': 0.3})}
    _, row = tool.comparison_table(chosen, uniform, 'top1')
    assert row.split() == ['s', '150', '1', '70.0000', '|', 'uniform', 'x0.50', '100',
                           '60.0000', '|', '65.0000', '+5.0000']
    _, row = tool.comparison_table(chosen, uniform, 'nll')
    assert row.split()[-4:] == ['0.4000', '|', '0.3500', '-0.0500']


def test_resume_continues_an_evolution_search(tiny_supernet, tmp_path):
    tool = load_tool('search')
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo') == 0
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo', 'search_cfg.max_epochs=2',
               '--resume') == 0
    results = json.loads((tmp_path / 'evo' / 'search_results.json').read_text())
    assert len(results['records']) == 8 and len(results['history']) == 2
    assert all(r['flops'] <= 60000 for r in results['records'])
    assert (tmp_path / 'evo' / 'best_subnet.yaml').is_file()


def test_a_saved_search_is_neither_restarted_nor_overwritten_without_being_told(
        tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('search')
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo') == 0
    state = tmp_path / 'evo' / 'search_state.json'
    saved = state.read_text()
    log = LogCapture(tool, monkeypatch)
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo') == 2
    assert f'{state}: a search was saved here (1 generation(s) done); pass --resume' in log.text
    assert '--overwrite to start again' in log.text and state.read_text() == saved
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo', 'search_cfg.max_epochs=2',
               '--overwrite') == 0
    assert json.loads(state.read_text())['generation'] == 2  # started at generation 0


def test_resume_refuses_another_checkpoint_and_accepts_the_same_one_moved(
        tiny_supernet, tmp_path, monkeypatch):
    """Scores of two checkpoints would be ranked in one table: the state records the
    checkpoint (path, size, SHA-256), and a resume must load the same contents."""
    tool = load_tool('search')
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'evo') == 0
    state = tmp_path / 'evo' / 'search_state.json'
    recorded = json.loads(state.read_text())['settings']['checkpoint']
    assert recorded['path'] == str(tiny_supernet.resolve())
    assert recorded['size'] == tiny_supernet.stat().st_size and len(recorded['sha256']) == 64
    other = tmp_path / 'other.pth'
    checkpoint = torch.load(tiny_supernet, weights_only=True)
    checkpoint['state_dict'] = {k: v + 1 if v.is_floating_point() else v
                                for k, v in checkpoint['state_dict'].items()}
    torch.save(checkpoint, other)
    log = LogCapture(tool, monkeypatch)
    assert run(tool, other, EVOLUTION, tmp_path / 'evo', 'search_cfg.max_epochs=2',
               '--resume') == 2
    assert f'{state}: cannot resume: the checkpoint is {tiny_supernet.resolve()} (' in log.text
    assert f'in the saved search but {other} (' in log.text
    assert json.loads(state.read_text())['generation'] == 1  # nothing scored with it
    moved = tmp_path / 'moved.pth'
    moved.write_bytes(tiny_supernet.read_bytes())
    assert run(tool, moved, EVOLUTION, tmp_path / 'evo', 'search_cfg.max_epochs=2',
               '--resume') == 0
    saved = json.loads(state.read_text())
    assert saved['generation'] == 2 and saved['settings']['checkpoint']['path'] == str(moved)


def test_resume_without_a_saved_search_names_the_file(tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    assert run(tool, tiny_supernet, EVOLUTION, tmp_path / 'none', '--resume') == 2
    assert f"--resume: {tmp_path / 'none' / 'search_state.json'} does not exist" in log.text


@pytest.mark.slow  # whole tool runs, interrupted and resumed
def test_ctrl_c_ends_with_one_line_saying_how_to_resume(tiny_supernet, tmp_path, run_python):
    """SIGINT once a generation is saved: no traceback, exit 130, and the line names the
    state file and the command that continues the search.  The process signals itself
    from a hook after generation 1 (``tests/data/interrupt_after_generation.py``): a
    timer in the test could fire after this small search had already ended."""
    work_dir = tmp_path / 'sigint'
    config = tmp_path / 'sigint_search.py'
    config.write_text(
        f"_base_ = [{str(TINY)!r}]\n"
        "custom_imports = dict(imports=['interrupt_after_generation'], "
        "allow_failed_imports=False)\n"
        "custom_hooks = [dict(type='InterruptAfterGenerationHook', generation=1)]\n"
        f"search_cfg = {dict(EVOLUTION, max_epochs=1000)!r}\n")
    state = work_dir / 'search_state.json'
    result = run_python('tools/search.py', str(config), str(tiny_supernet), '--work-dir',
                        str(work_dir))
    output = result.stdout + result.stderr
    assert result.returncode == 130, output[-3000:]
    assert json.loads(state.read_text())['generation'] == 2
    assert 'Traceback' not in output and 'KeyboardInterrupt' not in output
    lines = [line for line in output.splitlines() if 'interrupted' in line]
    assert len(lines) == 1
    assert f'is in {state}: continue with `python tools/search.py {config} ' in lines[0]
    assert lines[0].endswith(f'--work-dir {work_dir} --resume`')


def test_the_resume_command_of_ctrl_c_repeats_the_cfg_options(tmp_path):
    """The saved settings and data digests came from the --cfg-options: a resume without
    them is refused (``top_k is 1 in the saved search but 2 now``), so the command the
    line gives repeats them, quoted for the shell, and parses back to the same options."""
    tool = load_tool('search')
    work_dir = tmp_path / 'my search'
    work_dir.mkdir()
    (work_dir / 'search_state.json').write_text('{}')
    argv = ['my search.py', 'epoch 1.pth', '--work-dir', str(work_dir), '--cfg-options',
            'search_cfg.top_k=1', 'search_cfg.constraints.flops=6e4',
            'val_dataloader.dataset.indices=[0,1,(2,3)]', 'randomness.deterministic=True',
            'load_from=None', "experiment_name='run 1'"]
    args = tool.parse_args(argv)
    cfg = Config(dict(search_cfg=dict(type='EvolutionSearchLoop'), work_dir=str(work_dir)))
    line = tool.interrupted(args, cfg)
    command = line.split('continue with `')[1].rstrip('`')
    assert command == ("python tools/search.py 'my search.py' 'epoch 1.pth' --cfg-options "
                       'search_cfg.top_k=1 search_cfg.constraints.flops=60000.0 '
                       "'val_dataloader.dataset.indices=[0,1,(2,3)]' "
                       'randomness.deterministic=True load_from=None experiment_name=run1 '
                       f"--work-dir '{work_dir}' --resume")
    resumed = tool.parse_args(shlex.split(command)[2:])
    assert resumed.cfg_options == args.cfg_options and resumed.resume
    assert (resumed.config, resumed.checkpoint, resumed.work_dir) == \
        ('my search.py', 'epoch 1.pth', str(work_dir))


def test_a_spent_space_ends_the_search_before_max_epochs(tiny_supernet, tmp_path):
    """The tiny supernet has a few dozen subnets under the FLOPs constraint: once the
    draws find no new one the search ends, instead of running empty generations."""
    work_dir = tmp_path / 'spent'
    assert run(load_tool('search'), tiny_supernet, dict(EVOLUTION, max_epochs=1000),
               work_dir) == 0
    state = json.loads((work_dir / 'search_state.json').read_text())
    widths = [json.dumps(record['widths'], sort_keys=True) for record in state['records']]
    assert state['generation'] < 1000 and len(set(widths)) == len(widths)
    log = '\n'.join(path.read_text() for path in work_dir.glob('*/*.log'))
    assert (f"generation {state['generation']}: the draws found no new subnet within the "
            f"constraints ({len(widths)} scored); the search ends here, "
            f"{1000 - state['generation']} of 1000 generations unrun") in log


@pytest.mark.parametrize('search_cfg, extra, message', [
    (None, (), "search_cfg: missing; this tool needs"),
    (dict(type='ValLoop'), (), "search_cfg.type: 'ValLoop' is not a search loop"),
    (GREEDY, ('search_cfg.max_bins=3', ),
     "search_cfg.max_bins: GreedySearchLoop takes no argument 'max_bins'"),
    # a letter off a key the config sets: taken for a misspelling of it
    (GREEDY, ('search_cfg.target_flop=3', ), "--cfg-options search_cfg.target_flop: the config "
     "has no such key (closest: search_cfg.target_flops"),
    (GREEDY, ('search_cfg.target_flops=[10]', ), 'target_flops: 10 is below'),
    (GREEDY, ('--resume', ), '--resume: GreedySearchLoop does not checkpoint'),
    (EVOLUTION, ('search_cfg.constraints.latency=3', ), 'constraints.latency: unknown'),
    (EVOLUTION, ('search_cfg.top_k=9', ), r'top_k must be in [1, num_candidates], got 9'),
])
def test_errors_name_the_key_at_fault(tiny_supernet, tmp_path, monkeypatch, search_cfg, extra,
                                      message):
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    assert run(tool, tiny_supernet, search_cfg, tmp_path / 'bad', *extra) == 2
    assert message in log.text


def test_a_metric_the_evaluator_lacks_is_refused_before_the_search(
        tiny_supernet, tmp_path, monkeypatch):
    """A misspelt score_key or tie_break_key is named, with the metrics there are, before
    any candidate is scored: an earlier search's results stay (even with --overwrite), and
    none are written."""
    tool = load_tool('search')
    work_dir = tmp_path / 'searched'
    assert run(tool, tiny_supernet, GREEDY, work_dir) == 0
    results = ['search_results.json', 'search_plot.png', 'subnet_flops30000.yaml']
    before = {name: (work_dir / name).read_bytes() for name in results}
    log = LogCapture(tool, monkeypatch)
    assert run(tool, tiny_supernet, dict(GREEDY, score_key='accuracy/top_1'), work_dir,
               '--overwrite') == 2
    assert "search_cfg.score_key: 'accuracy/top_1' is not a metric of the evaluator (closest: " \
        "accuracy/top1, accuracy/top5); it reports accuracy/top1, accuracy/top5" in log.text
    assert {name: (work_dir / name).read_bytes() for name in results} == before
    fresh = tmp_path / 'fresh'
    assert run(tool, tiny_supernet, dict(GREEDY, tie_break_key='accuracy/nll'), fresh) == 2
    assert "search_cfg.tie_break_key: 'accuracy/nll' is not a metric of the evaluator" \
        in log.messages[-1]
    assert not fresh.exists()  # refused before any candidate: not even the Runner's log


def test_a_missing_checkpoint_is_named(tmp_path, monkeypatch):
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    assert run(tool, tmp_path / 'none.pth', GREEDY, tmp_path / 'bad') == 2
    assert 'checkpoint: ' in log.text and 'none.pth does not exist' in log.text


@pytest.mark.parametrize('name', ['autoslim_plaincnn_digits_search.py',
                                  'autoslim_plaincnn_digits_evolution_search.py'])
def test_the_search_configs_fit_their_supernet(name):
    """Their targets and limits lie between the supernet's narrowest and widest subnets."""
    tool = load_tool('search')
    cfg = load_config(REPO / 'configs' / 'pruning' / 'autoslim' / name)
    check_config(cfg, tool.SEARCH_KEYS)
    tool.search_loop_class(cfg.search_cfg)
    init_default_scope('razorlib')
    supernet = MODELS.build(cfg.model)
    widest = supernet.flops_params().flops
    supernet.set_min_subnet()
    narrowest = supernet.flops_params().flops
    limits = cfg.search_cfg.get('target_flops') or [cfg.search_cfg.constraints.flops]
    assert all(narrowest < limit < widest for limit in limits)


EXTPROJ = REPO / 'tests' / 'data' / 'configs' / 'extproj_autoslim_search.py'


@pytest.mark.slow  # whole tool runs
def test_another_projects_config_trains_validates_and_searches_with_razorlib(
        tmp_path, run_python):
    """extproj stands in for mmpretrain (docs/mm_projects.md): its head calls
    ``set_pred_score`` on razorlib's data samples in validation, and the search runs as
    ``razorlib.GreedySearchLoop`` under the project's default scope."""
    script = (
        'import importlib.util, sys\n'
        'from pathlib import Path\n'
        'from mmengine.config import Config\n'
        'from mmengine.runner import Runner\n'
        'config, work = sys.argv[1], Path(sys.argv[2])\n'
        'cfg = Config.fromfile(config)\n'  # custom_imports imports razorlib and extproj
        'cfg.work_dir = str(work / "train")\n'
        'runner = Runner.from_cfg(cfg)\n'
        'runner.train()\n'
        'print("top1", runner.message_hub.get_scalar("val/accuracy/top1").current())\n'
        'spec = importlib.util.spec_from_file_location("search", "tools/search.py")\n'
        'tool = importlib.util.module_from_spec(spec)\n'
        'spec.loader.exec_module(tool)\n'
        'print("search exit", tool.main([config, str(work / "train" / "epoch_3.pth"),\n'
        '                                "--work-dir", str(work / "search")]))\n')
    result = run_python('-c', script, str(EXTPROJ), str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert 'search exit 0' in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    top1 = float(next(line.split()[1] for line in result.stdout.splitlines()
                      if line.startswith('top1')))
    assert top1 > 40  # validation ran through the predicting head of the project
    results = json.loads((tmp_path / 'search' / 'search_results.json').read_text())
    assert set(results['chosen']) == {'subnet_flops25000', 'subnet_flops12000'}
    assert all(entry['flops'] <= entry['limits']['flops']
               for entry in results['chosen'].values())


@pytest.mark.parametrize('options, message', [
    ({'search_cfg.type': 'GreedySearchLoop'},
     "search_cfg.type: 'GreedySearchLoop' is not registered in the loop registry (scope "
     "'extproj'); scope 'razorlib' registers it: write type='razorlib.GreedySearchLoop'"),
    ({'default_scope': 'razorlib'},
     "model.architecture.width: ImageClassifier takes no argument 'width'; it takes "),
    ({'default_scope': 'razorlib'},
     "default_scope 'razorlib' picked razorlib.models.classifiers.image_classifier."
     "ImageClassifier, and scope 'extproj' has another 'ImageClassifier': write "
     "type='extproj.ImageClassifier', or set default_scope='extproj'"),
    ({'model.pruner.type': 'razorlib.RatioPruner'}, None),
])
def test_another_projects_config_is_checked_in_its_scope(monkeypatch, options, message):
    monkeypatch.syspath_prepend(str(REPO / 'tests' / 'data'))
    cfg = load_config(EXTPROJ, options)
    if message is None:
        check_config(cfg, load_tool('search').SEARCH_KEYS)
        return
    with pytest.raises(ConfigError) as info:
        check_config(cfg, load_tool('search').SEARCH_KEYS)
    assert message in str(info.value)
