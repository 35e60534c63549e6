"""tools/train.py: resume reproduces an uninterrupted run; CPU DDP under torchrun; errors."""
import signal

import pytest
import torch

from conftest import REPO, TINY, LogCapture, load_tool

from razorlib.engine.checkpoint_check import read_checkpoint


def train(*argv: str) -> int:
    return load_tool('train').main([str(TINY), *argv])


def assert_same(a, b, where: str = '') -> None:
    """Nested checkpoint contents are equal, tensors exactly."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f'{where}.{key}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f'{where}[{index}]')
    else:
        assert a == b, where


@pytest.mark.slow  # three whole tools/train.py runs
def test_killed_after_two_epochs_and_resumed_ends_like_an_uninterrupted_run(
        tmp_path, run_python):
    options = ['train_cfg.max_epochs=3', 'randomness.seed=5']
    assert train('--work-dir', str(tmp_path / 'straight'), '--cfg-options', *options,
                 'experiment_name=straight') == 0
    killed = tmp_path / 'killed'
    (tmp_path / 'kill.py').write_text(
        f"_base_ = [{str(TINY)!r}]\n"
        "custom_imports = dict(imports=['kill_after_epoch'], allow_failed_imports=False)\n"
        "custom_hooks = _base_.custom_hooks + [dict(type='KillAfterEpochHook', epoch=2)]\n")
    result = run_python('tools/train.py', str(tmp_path / 'kill.py'), '--work-dir', str(killed),
                        '--cfg-options', *options)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    assert (killed / 'epoch_2.pth').is_file() and not (killed / 'epoch_3.pth').exists()
    assert train('--work-dir', str(killed), '--resume', '--cfg-options', *options,
                 'experiment_name=resumed') == 0
    straight = read_checkpoint(tmp_path / 'straight' / 'epoch_3.pth')
    resumed = read_checkpoint(killed / 'epoch_3.pth')
    for key in ('state_dict', 'optimizer', 'param_schedulers'):
        assert_same(straight[key], resumed[key], key)
    assert int(resumed['state_dict']['step_count']) == 3 * 23


@pytest.mark.slow  # a multi-process run
def test_cpu_ddp_under_torchrun(tmp_path, run_python):
    result = run_python('-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
                        'tools/train.py', str(TINY), '--launcher', 'pytorch',
                        '--work-dir', str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert 'Distributed training: True' in log
    assert 'gloo threads still running' not in log  # what aborted ranks at exit
    checkpoint = read_checkpoint(tmp_path / 'epoch_1.pth')
    assert int(checkpoint['state_dict']['step_count']) == 12  # 1,437 images / 2 ranks / 64
    assert (tmp_path / 'subnet_final.yaml').is_file()


def test_launcher_pytorch_outside_torchrun_is_refused_naming_what_is_missing(
        tmp_path, monkeypatch, capsys):
    """Started without torchrun, the process group's env:// rendezvous failed with a
    traceback (``environment variable RANK expected, but not set``)."""
    for name in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('MASTER_PORT', '29500')
    with pytest.raises(SystemExit) as info:
        load_tool('train').main([str(TINY), '--work-dir', str(tmp_path / 'ddp'),
                                 '--launcher', 'pytorch'])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        'error: --launcher pytorch: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR not '
        'set, as torchrun sets them; start the tool as `torchrun --nproc_per_node N '
        'tools/train.py CONFIG --launcher pytorch`, or leave --launcher out to train in this '
        'process')
    assert not (tmp_path / 'ddp').exists()


def test_config_mistakes_name_the_key(tmp_path, monkeypatch):
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    code = tool.main([str(TINY), '--work-dir', str(tmp_path), '--cfg-options',
                      'model.architecture.backbone.type=PlainNet'])
    assert code == 2
    assert "model.architecture.backbone.type: 'PlainNet' is not registered" in log.text
    assert tool.main([str(tmp_path / 'missing.py')]) == 2
    assert 'missing.py does not exist' in log.messages[-1]


def test_train_tool_runs_as_a_script(tmp_path, run_python):
    result = run_python('tools/train.py', str(TINY), '--work-dir', str(tmp_path),
                        '--cfg-options', 'model.num_random_sample=1')
    assert result.returncode == 2
    assert '--cfg-options model.num_random_sample: the config has no such key (closest: ' \
        'model.num_random_samples' in result.stdout + result.stderr


ITE = REPO / 'configs' / 'pruning' / 'ite_prune' / 'ite_prune_plaincnn_digits.py'


def test_a_value_the_model_refuses_is_one_line_before_the_work_dir(tmp_path, monkeypatch):
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    bad = tmp_path / 'bad.py'
    bad.write_text(f"_base_ = ['{ITE}']\nmodel = dict(pruner=dict(_delete_=True, "
                   "type='ImportancePruner', importance='l1', flop=0.5))\n")
    assert tool.main([str(bad), '--work-dir', str(tmp_path / 'a')]) == 2
    assert "model.pruner.flop: ImportancePruner takes no argument 'flop' (closest: flops)" \
        in log.messages[-1]
    assert tool.main([str(ITE), '--work-dir', str(tmp_path / 'b'), '--cfg-options',
                      'model.step_freq=-1']) == 2
    assert log.messages[-1] == f'{ITE}: model: ItePruneAlgorithm: step_freq must be an ' \
        'integer >= 1, got -1'
    assert not (tmp_path / 'a').exists() and not (tmp_path / 'b').exists()


def test_load_from_of_another_width_is_refused_and_a_new_head_accepted(
        tiny_supernet, tmp_path, monkeypatch):
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                      f'load_from={tiny_supernet}',
                      'model.architecture.backbone.channels=(4,8)']) == 2
    assert log.messages[-1].startswith(f'{tiny_supernet}: not a checkpoint of this AutoSlim: ')
    assert 'here, (4, 3, 3, 3) in the model' in log.messages[-1]
    assert not (tmp_path / 'w').exists()
    # the backbone fits, the head is of another class count: fine-tuning goes on
    args = tool.parse_args([str(TINY), '--cfg-options', f'load_from={tiny_supernet}',
                            'model.architecture.head.num_classes=5'])
    assert tool.checked_config(args).load_from == str(tiny_supernet)


def test_resume_without_a_checkpoint_starts_as_configured_from_load_from(
        tiny_supernet, tmp_path, monkeypatch):
    """A first run under ``--resume`` (the same command for every run of a preemptible
    job) starts as its config says: from ``load_from`` (mmengine alone would drop it and
    start from the initial weights), saying so; once a checkpoint is there, from it."""
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)

    def config(work_dir):
        return tool.checked_config(tool.parse_args([
            str(TINY), '--work-dir', str(work_dir), '--resume',
            '--cfg-options', f'load_from={tiny_supernet}']))

    first = config(tmp_path / 'first')
    assert (first.load_from, bool(first.get('resume'))) == (str(tiny_supernet), False)
    assert f'--resume: no checkpoint in {tmp_path / "first"} to resume; this run starts from ' \
        f'{tiny_supernet}' in log.text
    again = tmp_path / 'again'
    again.mkdir()
    (again / 'last_checkpoint').write_text(str(tiny_supernet))
    resumed = config(again)
    assert (resumed.load_from, resumed.resume) == (str(tiny_supernet), True)


def test_resume_true_in_the_config_checks_the_checkpoint_as_resume_does(
        tiny_supernet, tmp_path, monkeypatch):
    """``resume=True`` in the config (or ``--cfg-options``) makes the Runner resume, with
    mmengine's strict=False load: a checkpoint with a head of another class count, fine
    for ``load_from``, would resume with that head at its initial weights.  It is checked
    as ``--resume`` checks, from ``load_from`` or the work dir's last checkpoint."""
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)
    assert tool.main([str(TINY), '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                      'resume=True', f'load_from={tiny_supernet}',
                      'model.architecture.head.num_classes=5']) == 2
    assert log.messages[-1].startswith(f'{tiny_supernet}: not a checkpoint of this AutoSlim: ')
    assert 'architecture.head.fc.weight: (10, 16) here, (5, 16) in the model' \
        in log.messages[-1]
    assert not (tmp_path / 'w').exists()
    latest = tmp_path / 'latest'
    latest.mkdir()
    (latest / 'last_checkpoint').write_text(str(tiny_supernet))
    assert tool.main([str(TINY), '--work-dir', str(latest), '--cfg-options', 'resume=True',
                      'model.architecture.head.num_classes=5']) == 2
    assert log.messages[-1].startswith(f'{tiny_supernet}: not a checkpoint of this AutoSlim: ')
    assert sorted(path.name for path in latest.iterdir()) == ['last_checkpoint']
    # the same model resumes
    args = tool.parse_args([str(TINY), '--work-dir', str(latest), '--cfg-options',
                            'resume=True'])
    assert tool.checked_config(args).load_from == str(tiny_supernet)


def test_a_pretrained_init_checkpoint_is_checked_like_load_from(
        tiny_supernet, tmp_path, monkeypatch):
    """``init_cfg=dict(type='Pretrained', ...)`` loads with strict=False: a checkpoint of
    another model would load nothing and train from the initial weights, so it is
    checked against the module it initialises (its ``prefix`` taken off)."""
    tool = load_tool('train')
    log = LogCapture(tool, monkeypatch)

    def code(init: str) -> int:
        config = tmp_path / 'pretrained.py'
        config.write_text(f'_base_ = [{str(TINY)!r}]\n'
                          f"model = dict(architecture=dict(init_cfg=dict(type='Pretrained', "
                          f'{init})))\n')
        return tool.main([str(config), '--work-dir', str(tmp_path / 'run'), '--cfg-options',
                          'train_cfg.max_epochs=0'])

    # the supernet's checkpoint holds architecture.* keys: without the prefix nothing fits
    assert code(f'checkpoint={str(tiny_supernet)!r}') == 2
    assert f'{tiny_supernet}: not a checkpoint of this' in log.text
    assert code(f"checkpoint={str(tmp_path / 'none.pth')!r}") == 2
    assert 'model.architecture.init_cfg.checkpoint: ' in log.messages[-1]
    assert not (tmp_path / 'run').exists()
    config = tmp_path / 'prefixed.py'
    config.write_text(f'_base_ = [{str(TINY)!r}]\n'
                      f"model = dict(architecture=dict(init_cfg=dict(type='Pretrained', "
                      f"checkpoint={str(tiny_supernet)!r}, prefix='architecture')))\n")
    assert tool.checked_config(tool.parse_args([str(config), '--work-dir',
                                                str(tmp_path / 'ok')])).model is not None
