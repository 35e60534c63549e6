"""tools/pipeline.py end to end (one epoch per training step): every tool runs in turn
and the table pairs each searched subnet with a uniform-width subnet of the same FLOPs;
from a fixed NAS subnet, its model is trained, quantized, pruned and fine-tuned."""
import importlib.util
import json
from pathlib import Path

import pytest
from mmengine.config import Config

from conftest import LogCapture

ROOT = Path(__file__).parents[2]
TOOL = ROOT / 'tools' / 'pipeline.py'
SUBNET_CFG = ROOT / 'configs' / 'nas' / 'spos' / 'spos_shufflenet_digits_subnet.py'
DENSE_CFG = ROOT / 'configs' / 'pruning' / 'distill' / 'plaincnn_digits_dense.py'
#: A subnet of the SPOS digits space (configs/nas/_base_/spos_shufflenet_digits_space.py).
SUBNET = {'backbone.stages.0.1': 'shuffle_xception', 'backbone.stages.0.2': 'shuffle_5x5',
          'backbone.stages.1.1': 'shuffle_3x3', 'backbone.stages.1.2': 'shuffle_7x7',
          'backbone.stages.1.3': 'shuffle_xception', 'backbone.stages.2.1': 'shuffle_3x3',
          'backbone.stages.2.2': 'shuffle_7x7'}


def load_tool():
    spec = importlib.util.spec_from_file_location('pipeline_tool', TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.fixture(scope='module')
def pipeline_run(tmp_path_factory):
    """One run of the README's command, one epoch per training step, two fine-tune seeds:
    its work dir and results (shared: the run takes minutes)."""
    work_dir = tmp_path_factory.mktemp('pipeline')
    assert load_tool().main(['--work-dir', str(work_dir), '--supernet-epochs', '1',
                             '--finetune-epochs', '1', '--seeds', '2']) == 0
    return work_dir, json.loads((work_dir / 'pipeline.json').read_text())


@pytest.mark.slow  # the README's whole command (its fixture the suite's longest item: 552 s
# of its 34 minutes on 2 vCPUs); the quick tests below cover its parts
@pytest.mark.xdist_group('pipeline_run')  # one worker builds the shared run once
def test_pipeline_runs_every_step_and_pairs_subnets_with_uniform_baselines(pipeline_run):
    work_dir, result = pipeline_run
    rows = {row['subnet']: row for row in result['rows']}
    assert len(result['pairs']) == 3 and len(rows) == 7
    full = rows['supernet max']
    for searched, uniform in result['pairs']:
        a, b = rows[searched], rows[uniform]
        assert a['flops'] < full['flops'] and a['params'] < full['params']
        assert abs(a['flops'] - b['flops']) < 0.05 * a['flops']  # equal FLOPs
        assert 0 <= a['int8_top1'] <= 100 and a['latency_ms'] > 0
        for row in (a, b):  # top-1 is the mean of the two fine-tune seeds
            assert len(row['top1_runs']) == 2
            assert abs(row['top1'] - sum(row['top1_runs']) / 2) < 1e-9
    log = (work_dir / 'pipeline.log').read_text()
    assert 'uniform, same FLOPs' in log and 'searched 1.20M' in log
    assert 'top-1 of each fine-tune seed' in log
    assert (work_dir / 'subnet0' / 'finetune_seed1').is_dir()


@pytest.mark.slow  # a second whole run (about 3.5 of the suite's minutes)
@pytest.mark.xdist_group('pipeline_run')
def test_the_readme_command_run_again_replaces_the_first_runs_results(pipeline_run):
    # search and prune refuse an earlier run's files unless told --overwrite, which the
    # pipeline passes; one fine-tune seed is enough to show it
    work_dir, result = pipeline_run
    assert load_tool().main(['--work-dir', str(work_dir), '--supernet-epochs', '1',
                             '--finetune-epochs', '1', '--seeds', '1']) == 0
    again = json.loads((work_dir / 'pipeline.json').read_text())
    assert [row['subnet'] for row in again['rows']] == [row['subnet'] for row in result['rows']]
    assert all(len(row['top1_runs']) == 1 for row in again['rows'] if 'top1_runs' in row)


def test_the_pipeline_reads_the_searched_subnets_from_the_results_json(tmp_path):
    """The FLOPs targets and files come from ``chosen`` of the search's results JSON, as
    DumpSubnetHook writes it, largest target first; no file names are parsed."""
    from razorlib.engine.loops import SearchResult, SubnetRecord

    tool = load_tool()
    records = {f'pick{i}': SubnetRecord({'conv': i}, 100 * i, 10, 90.0) for i in (1, 2)}
    result = SearchResult(list(records.values()), records, [],
                          limits={'pick1': {'flops': 150.0}, 'pick2': {'flops': 250.0}})
    result.files = {name: tmp_path / f'{name}.yaml' for name in records}
    (tmp_path / 'search_results.json').write_text(json.dumps(result.to_dict(tmp_path)))
    assert tool.searched_subnets(tmp_path / 'search_results.json') == [
        (250.0, tmp_path / 'pick2.yaml'), (150.0, tmp_path / 'pick1.yaml')]


@pytest.mark.slow
def test_the_pipeline_starts_from_a_fixed_subnet(tmp_path):
    """--from-subnet: the subnet config's model trains, quantizes, prunes to half its
    FLOPs, fine-tunes (a sub_model of the fixed subnet) and quantizes again."""
    from razorlib.nas import FixedSubnet

    subnet = tmp_path / 'subnet.yaml'
    FixedSubnet(SUBNET).dump(subnet)
    run = tmp_path / 'run'
    assert load_tool().main([
        '--work-dir', str(run), '--from-subnet', str(SUBNET_CFG), '--cfg-options',
        f'model.fix_subnet={subnet}', '--train-epochs', '1', '--finetune-epochs', '1',
        '--seeds', '1', '--prune-flops', '0.5']) == 0
    rows = json.loads((run / 'pipeline.json').read_text())['rows']
    assert [row['subnet'] for row in rows] == ['subnet', 'pruned 0.5 FLOPs']
    trained, pruned = rows
    assert pruned['flops'] <= 0.5 * trained['flops'] and pruned['params'] < trained['params']
    for row in rows:
        assert 0 <= row['int8_top1'] <= 100 and row['latency_ms'] > 0
    tune = Config.fromfile(str(run / 'pruned0' / 'finetune_config.py'))
    assert tune.model.type == 'sub_model' and tune.model.architecture.type == 'nas_subnet'
    assert tune.model.architecture.fix_subnet == str(subnet)
    assert tune.load_from == str(run / 'pruned0' / 'prune' / 'slim.pth')
    assert 'pruned 0.5 FLOPs' in (run / 'pipeline.log').read_text()


@pytest.mark.parametrize('config, options, message', [
    ('nope.py', [], '--from-subnet config file {tmp}/nope.py does not exist'),
    (str(SUBNET_CFG), ['model.fix_subnet={tmp}/nope.yaml'],
     '--from-subnet ' + str(SUBNET_CFG) + ': model.fix_subnet {tmp}/nope.yaml does not exist'),
    (str(DENSE_CFG), ['model.backbone.chanels=3'], '--from-subnet --cfg-options '
     'model.backbone.chanels: the config has no such key (closest: model.backbone.channels'),
])
def test_from_subnet_refusals_are_one_line_and_write_nothing(tmp_path, monkeypatch, config,
                                                             options, message):
    """A missing config or subnet file, or a misspelt key: exit code 2 before the work dir
    (and its pipeline.log) is made."""
    tool = load_tool()
    log = LogCapture(tool, monkeypatch)
    config = config if Path(config).is_absolute() else str(tmp_path / config)
    options = [option.format(tmp=tmp_path) for option in options]
    argv = ['--work-dir', str(tmp_path / 'run'), '--from-subnet', config]
    assert tool.main(argv + (['--cfg-options', *options] if options else [])) == 2
    assert len(log.messages) == 1 and log.messages[0].startswith(message.format(tmp=tmp_path))
    assert not (tmp_path / 'run').exists()


@pytest.mark.parametrize('flags, message', [
    (['--cfg-options', 'model.fix_subnet=x.yaml'], '--cfg-options: for --from-subnet CONFIG only'),
    (['--prune-flops', '0.3'], '--prune-flops: for --from-subnet CONFIG only'),
    (['--train-epochs', '3'], '--train-epochs: for --from-subnet CONFIG only'),
    (['--from-subnet', 'c.py', '--supernet-epochs', '5'],
     '--supernet-epochs: for the AutoSlim pipeline only (without --from-subnet)'),
])
def test_a_flag_of_the_other_pipeline_is_refused_not_ignored(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_tool().parse_args(flags)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f'error: {message}')


def test_a_failing_step_stops_the_pipeline_with_its_code_in_one_line(tmp_path):
    """tools/train.py refuses a model type no registry has (exit code 2): the pipeline
    exits 2 too, its last line naming the step, the step's own line and its log."""
    run = tmp_path / 'run'
    assert load_tool().main(['--work-dir', str(run), '--from-subnet', str(DENSE_CFG),
                             '--cfg-options', 'model.backbone.type=Nope']) == 2
    step_log = run / 'logs' / '1_train_subnet.log'
    last = (run / 'pipeline.log').read_text().strip().splitlines()[-1]
    assert last.endswith(f"step '1_train_subnet' (tools/train.py) failed with code 2: "
                         f"{run / 'subnet_config.py'}: model.backbone.type: 'Nope' is not "
                         f"registered in the model registry (scope 'razorlib'); its log: "
                         f'{step_log}')
    assert 'Traceback' not in (run / 'pipeline.log').read_text()


@pytest.mark.parametrize('code, log_text, message', [
    (-9, 'epoch 3, iter 10/50\n', "was killed by SIGKILL: its log ends: epoch 3, iter 10/50"),
    (-99, '', 'was killed by signal 99: its log is empty'),
    (2, 'x.py: model.type: bad\n', 'failed with code 2: x.py: model.type: bad'),
])
def test_a_step_killed_by_a_signal_is_said_killed_not_failed(tmp_path, code, log_text, message):
    """A step the system killed (out of memory: SIGKILL) exits 128 + the signal, and
    says so; its log's last line is what it was doing, not a reason."""
    log = tmp_path / 'step.log'
    log.write_text(log_text)
    err = load_tool().StepFailed('2_search', 'search', code, log)
    assert str(err) == f"step '2_search' (tools/search.py) {message}; its log: {log}"
    assert err.code == (128 - code if code < 0 else code)


def test_set_epochs_stretches_the_schedulers_that_ended_with_the_old_schedule():
    cfg = Config(dict(train_cfg=dict(max_epochs=20, val_interval=20), param_scheduler=[
        dict(type='LinearLR', by_epoch=False, begin=0, end=50),
        dict(type='CosineAnnealingLR', T_max=20, by_epoch=True, begin=0, end=20)]))
    load_tool().set_epochs(cfg, 3)
    assert cfg.train_cfg.max_epochs == cfg.train_cfg.val_interval == 3
    assert cfg.default_hooks.checkpoint.interval == 3
    assert cfg.param_scheduler[0].end == 50  # iteration-based warm-up left alone
    assert cfg.param_scheduler[1].T_max == cfg.param_scheduler[1].end == 3
