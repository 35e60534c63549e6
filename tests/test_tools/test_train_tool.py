"""tools/train.py: resume reproduces an uninterrupted run; CPU DDP under torchrun; errors."""
import torch

from conftest import TINY, LogCapture, load_tool


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


def test_resume_after_two_epochs_ends_like_an_uninterrupted_run(tmp_path):
    options = ['train_cfg.max_epochs=3', 'randomness.seed=5']
    assert train('--work-dir', str(tmp_path / 'straight'), '--cfg-options', *options,
                 'experiment_name=straight') == 0
    stopped = tmp_path / 'stopped'
    assert train('--work-dir', str(stopped), '--cfg-options', 'train_cfg.max_epochs=2',
                 'randomness.seed=5', 'experiment_name=stopped') == 0
    assert (stopped / 'epoch_2.pth').is_file() and not (stopped / 'epoch_3.pth').exists()
    assert train('--work-dir', str(stopped), '--resume', '--cfg-options', *options,
                 'experiment_name=resumed') == 0
    straight = torch.load(tmp_path / 'straight' / 'epoch_3.pth')
    resumed = torch.load(stopped / 'epoch_3.pth')
    for key in ('state_dict', 'optimizer', 'param_schedulers'):
        assert_same(straight[key], resumed[key], key)
    assert int(resumed['state_dict']['step_count']) == 3 * 23


def test_cpu_ddp_under_torchrun(tmp_path, run_python):
    result = run_python('-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
                        'tools/train.py', str(TINY), '--launcher', 'pytorch',
                        '--work-dir', str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert 'Distributed training: True' in log
    checkpoint = torch.load(tmp_path / 'epoch_1.pth')
    assert int(checkpoint['state_dict']['step_count']) == 12  # 1,437 images / 2 ranks / 64
    assert (tmp_path / 'subnet_final.yaml').is_file()


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
    assert 'model.num_random_sample: AutoSlim takes no argument' in result.stdout + result.stderr
