"""tools/search.py refuses a checkpoint of another model, a setting of its loop, a metric the
evaluator lacks and a target or limit no subnet reaches in one line with exit code 2, and
leaves the file system as it found it: no new work dir (nor its parents), and in an
earlier search's work dir, even with --overwrite, its results and config dump as they were
and nothing new."""
import time
from pathlib import Path
from typing import Dict

import mmengine.runner.runner
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import razorlib.engine.utils
from conftest import TINY, LogCapture, load_tool
from razorlib.registry import MODELS

# The tiny supernet spans 132k FLOPs (whole) to 19k (1 of 4 bins per space).
GREEDY = dict(type='GreedySearchLoop', target_flops=[60000], max_channel_bins=4,
              recalib_batches=1)
EVOLUTION = dict(type='EvolutionSearchLoop', max_epochs=1, num_candidates=4, top_k=2,
                 num_mutation=1, num_crossover=1, constraints=dict(flops=60000),
                 recalib_batches=1)


def search_config(path: Path, search_cfg: dict) -> str:
    path.write_text(f'_base_ = [{str(TINY)!r}]\ncustom_hooks = []\n'
                    f'search_cfg = {search_cfg!r}\n')
    return str(path)


@pytest.fixture(scope='module')
def plain_state_dict(tmp_path_factory) -> Path:
    """The bare state_dict of the tiny supernet's architecture (no AutoSlim keys)."""
    init_default_scope('razorlib')
    path = tmp_path_factory.mktemp('plain') / 'plain.pth'
    torch.save(MODELS.build(Config.fromfile(TINY).model.architecture).state_dict(), path)
    return path


def options(name: str, *keys: str) -> list:
    """``--cfg-options`` with an experiment name of its own: runs in one process within the
    same second would share the Runner's logger and visualizer, named by the timestamp."""
    return ['--cfg-options', f'experiment_name=refused_{name}', *keys]


def snapshot(folder: Path) -> Dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its content."""
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob('*')) if path.is_file()}


REFUSALS = [
    ('plain', GREEDY, (), 'not a checkpoint of this AutoSlim: '),
    (None, dict(GREEDY, target_flops=[10]), (), 'target_flops: 10 is below the FLOPs of the '
     'narrowest subnet'),
    (None, dict(EVOLUTION, constraints=dict(flops=1000)), (), "constraints: {'flops': 1000.0} "
     'exclude even the narrowest subnet'),
    (None, dict(EVOLUTION, constraints=dict(latency=3)), (), 'constraints.latency: unknown '
     'constraint'),
    (None, GREEDY, ('search_cfg.score_key=accuracy/top_1', ),
     "search_cfg.score_key: 'accuracy/top_1' is not a metric of the evaluator"),
]


@pytest.mark.parametrize('checkpoint, search_cfg, keys, message', REFUSALS)
def test_a_refused_search_makes_no_work_dir(tiny_supernet, plain_state_dict, tmp_path,
                                            monkeypatch, checkpoint, search_cfg, keys,
                                            message):
    tool = load_tool('search')
    log = LogCapture(tool, monkeypatch)
    work_dir = tmp_path / 'new' / 'search'  # its parent is new too
    checkpoint = plain_state_dict if checkpoint == 'plain' else tiny_supernet
    assert tool.main([search_config(tmp_path / 'search.py', search_cfg), str(checkpoint),
                      '--work-dir', str(work_dir), *options(tmp_path.name, *keys)]) == 2
    assert len(log.messages) == 1 and message in log.messages[0]
    assert not (tmp_path / 'new').exists()


class StoppedClock:
    """``time`` for the Runner and ``new_log_second``, standing still until slept on: two
    searches in a row start in the same second, as a fast one and the next do (the
    Runner names its log folder by the second)."""

    def __init__(self):
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def strftime(self, fmt: str, when=None) -> str:
        return time.strftime(fmt, time.localtime(self.now) if when is None else when)

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.mark.parametrize('same_second', [False, True])
def test_a_refusal_over_an_earlier_search_leaves_it_as_it_was(tiny_supernet, tmp_path,
                                                              monkeypatch, same_second):
    """Even with --overwrite, a target no subnet reaches is refused before the earlier
    results are deleted; the config dump the Runner replaced is restored.  Started in
    the earlier search's second, the refused one logs in a folder of its own, which it
    removes, not the earlier one's."""
    if same_second:
        clock = StoppedClock()
        monkeypatch.setattr(mmengine.runner.runner, 'time', clock)
        monkeypatch.setattr(razorlib.engine.utils, 'time', clock)
    tool = load_tool('search')
    work_dir = tmp_path / 'searched'
    config = search_config(tmp_path / 'search.py', GREEDY)
    assert tool.main([config, str(tiny_supernet), '--work-dir', str(work_dir),
                      *options('first')]) == 0
    (work_dir / 'search.py').write_text('# the earlier dump\n')
    before = snapshot(work_dir)
    assert {'search_results.json', 'search_plot.png', 'subnet_flops60000.yaml'} <= set(before)
    log = LogCapture(tool, monkeypatch)
    assert tool.main([config, str(tiny_supernet), '--work-dir', str(work_dir), '--overwrite',
                      *options('second', 'search_cfg.target_flops=[10]')]) == 2
    assert len(log.messages) == 1 and 'target_flops: 10 is below' in log.messages[0]
    assert snapshot(work_dir) == before


@pytest.mark.parametrize('shared', [False, True])
def test_a_refusal_keeps_what_another_run_wrote_meanwhile(tiny_supernet, tmp_path, monkeypatch,
                                                          shared):
    """Only the Runner's own log folder and config dump are removed, and new folders only
    when left empty: another run writing into the same new parent, or the same existing
    work dir, while this one starts keeps its files."""
    from mmengine.runner import Runner

    tool = load_tool('search')
    work_dir = tmp_path / ('shared' if shared else 'new' / Path('search'))
    if shared:
        work_dir.mkdir()
    other = (work_dir if shared else tmp_path / 'new') / 'other_run' / 'epoch_1.pth'
    from_cfg = Runner.from_cfg.__func__

    def writing_beside(cls, cfg):
        other.parent.mkdir(parents=True, exist_ok=True)
        other.write_text("another run's result\n")
        return from_cfg(cls, cfg)

    monkeypatch.setattr(Runner, 'from_cfg', classmethod(writing_beside))
    assert tool.main([search_config(tmp_path / 'search.py', GREEDY), str(tiny_supernet),
                      '--work-dir', str(work_dir),
                      *options(f'beside{shared}', 'search_cfg.target_flops=[10]')]) == 2
    assert other.read_text() == "another run's result\n"
    # the Runner's log folder and dump are gone, and so is the new work dir it left empty
    assert [path.name for path in other.parent.parent.iterdir()] == ['other_run']
