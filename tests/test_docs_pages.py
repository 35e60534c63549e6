"""The ```python blocks of the docs pages run on today's code, in order, in one namespace
per page (as ``test_integrations/test_transformers_doc.py`` does for docs/transformers.md).

What a block needs that it cannot have here (a trained checkpoint, a dataset on disk, a
Hugging Face model and tokenizer, a file an earlier command wrote) is given as a small
stand-in before the block runs.  A block that is not code to run (an item's schematic
repr, a config whose ``...`` stands for the user's own arguments) is marked in the page
by the line ``<!-- not run: <reason> -->`` right above its fence; the tests skip it and
check which blocks are marked, so a new block is run or marked on purpose.

Pages with tests of their own are not run here: transformers.md, ir.md, nas.md, the
quantization pages, the worked example of layer_kinds.md
(``test_layers/test_layer_kinds_doc.py``) and mm_projects.md's config
(``test_engine/test_mm_projects.py``).  The pages without ```python blocks
(tools/get_flops.md, pipeline.md, ptq.md, test.md) are checked to have none.
"""
import ast
import copy
import inspect
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / 'docs'
FENCE = re.compile(r'^```python\n(.*?)^```', re.S | re.M)
NOT_RUN = re.compile(r'<!--\s*not run:\s*(.+?)\s*-->\s*$', re.S)


def page_blocks(page):
    """``[(first line number, code, reason it is not run or None)]`` of a page."""
    text = (DOCS / page).read_text()
    blocks = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip('\n').splitlines()
        marker = NOT_RUN.search(before[-1]) if before else None
        line = text.count('\n', 0, match.start()) + 1
        blocks.append((line, match.group(1), marker.group(1) if marker else None))
    return blocks


def run_block(page, line, code, namespace):
    """Runs one block; the value of a last bare expression (a config dict, a
    ``....shape`` whose value a comment gives) is kept as ``_``, as a REPL keeps it.
    Tracebacks name the page and its line."""
    tree = ast.parse('\n' * line + code, str(DOCS / page))
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name('_', ast.Store())], value=last.value), last)
        ast.fix_missing_locations(tree)
    exec(compile(tree, str(DOCS / page), 'exec'), namespace)


def run_page(page, namespace, count, not_run=(), before=None, after=None):
    """Runs the blocks of ``page`` in order in ``namespace``; ``before[i]`` /
    ``after[i]`` are called with the namespace around block ``i`` (stand-ins, checks)."""
    blocks = page_blocks(page)
    assert len(blocks) == count, f'{page}: {len(blocks)} python blocks, the test knows {count}'
    assert [i for i, (_, _, reason) in enumerate(blocks) if reason] == list(not_run)
    for i, (line, code, reason) in enumerate(blocks):
        if reason:
            continue
        if before and i in before:
            before[i](namespace)
        run_block(page, line, code, namespace)
        if after and i in after:
            after[i](namespace)
    return namespace


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The blocks' relative paths (``configs/...``, ``work_dirs/...``) resolve in a
    temporary directory that links the repository's configs."""
    (tmp_path / 'configs').symlink_to(REPO / 'configs')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('RAZORLIB_CACHE_DIR', str(tmp_path / 'cache'))
    return tmp_path


def test_pages_without_python_blocks():
    for page in ('get_flops.md', 'pipeline.md', 'ptq.md', 'test.md'):
        assert page_blocks(Path('tools') / page) == []


def loop_takes(loop_cfg):
    """A loop config names a registered loop and only arguments it takes (those of its
    ``__init__`` and, where that passes ``**kwargs`` on, its bases')."""
    from razorlib.registry import LOOPS
    loop_cls = LOOPS.get(loop_cfg['type'])
    assert loop_cls is not None, loop_cfg['type']
    params = set()
    for cls in loop_cls.__mro__:
        if '__init__' not in vars(cls):
            continue
        signature = inspect.signature(cls.__init__).parameters.values()
        params |= {p.name for p in signature if p.kind is not p.VAR_KEYWORD}
        if all(p.kind is not p.VAR_KEYWORD for p in signature):
            break
    unknown = set(loop_cfg) - {'type'} - params
    assert not unknown, f'{loop_cfg["type"]} takes no {sorted(unknown)}'


# ---------------------------------------------------------------------------------------
# pruning.md

class _Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class _Head(nn.Module):
    def __init__(self, channels, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.fc(x.mean((2, 3)))


class TinyResNet(nn.Module):
    """The names the page uses (``layer1.0.bn1``, ``head.fc``), small enough to prune on
    224x224 inputs in a fraction of a second."""

    def __init__(self, channels=16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, stride=4, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(_Block(channels), _Block(channels))
        self.head = _Head(channels)

    def forward(self, x):
        return self.head(self.layer1(F.relu(self.bn1(self.conv1(x)))))


def _has_masks(model):
    return any(name.endswith(('in_mask', 'out_mask')) for name, _ in model.named_buffers())


def _tiny_llama():
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=100)
    return transformers.LlamaForCausalLM(config).eval()


def _tokenizer(text, return_tensors='pt'):
    """Stands in for a Hugging Face tokenizer: one id per character."""
    assert return_tensors == 'pt'
    ids = torch.tensor([[ord(c) % 100 for c in text]])
    return {'input_ids': ids, 'attention_mask': torch.ones_like(ids)}


def _digits_architecture():
    from mmengine.config import Config
    return Config.fromfile(
        str(REPO / 'configs/pruning/ite_prune/ite_prune_plaincnn_digits.py')).architecture


def test_pruning_page(in_tmp, capsys):
    from razorlib.registry import MODELS
    torch.manual_seed(0)
    model = TinyResNet()
    x = torch.randn(1, 3, 224, 224)
    batches = [(torch.randn(2, 3, 224, 224), torch.randint(0, 10, (2, ))) for _ in range(2)]
    namespace = dict(model=model, x=x, example_inputs=x, batches=batches,
                     fresh_model=TinyResNet(), loss_fn=F.cross_entropy)

    def one_call(ns):
        assert not _has_masks(ns['model'])  # prune works on a deep copy
        assert ns['slim'].head.fc.in_features == 8  # ratio=0.5, head excepted

    def step_by_step(ns):
        assert 'FROZEN' in capsys.readouterr().out  # the report names frozen groups
        slim = ns['slim']
        assert (in_tmp / 'subnet.yaml').exists()
        assert slim.conv1.out_channels == len(ns['cfg'].modules['conv1']['out'].index)
        ns['model'] = TinyResNet()  # the next examples prepare a model of their own

    def scores(ns):
        scores, pruner = ns['scores'], ns['pruner']
        assert sorted(scores) == sorted(pruner.groups.prunable)
        prunable = pruner.groups.prunable
        assert all(len(s) == prunable[g].num_channels for g, s in scores.items())

    def llm(ns):
        ns['model'] = _tiny_llama()
        ns['tokenizer'] = _tokenizer
        ns['calibration'] = ['a few lines of text', 'to calibrate on']

    def half_the_mlp(ns):
        assert ns['slim'].model.layers[0].mlp.up_proj.out_features == 64
        assert ns['model'].model.layers[0].mlp.up_proj.out_features == 128

    def complexity(ns):
        from razorlib.models import ResNet
        ns['model'] = ResNet(depth=18, num_classes=1000)  # the figures of the comment
        ns['example_inputs'] = torch.randn(1, 3, 224, 224)
        capsys.readouterr()

    def counted(ns):
        assert capsys.readouterr().out.strip() == 'FLOPs 1.82G, params 11.69M'

    def algorithms(ns):
        ns['architecture'] = _digits_architecture()

    def algorithm_configs(ns):
        # the page shows the configs as they are, and each builds
        from mmengine.config import Config
        code = page_blocks('pruning.md')[7][1]
        for part in re.split(r'^(?=# \w+\.py:)', code, flags=re.M)[1:]:
            name = re.match(r'# (\w+\.py):', part).group(1)
            shown = {}
            exec(part, dict(architecture=ns['architecture']), shown)
            path = next(REPO.glob(f'configs/pruning/*/{name}'))
            config = Config.fromfile(str(path))
            expected = config.model.to_dict()
            expected.pop('_delete_', None)
            assert shown['model'] == expected, name
            if 'custom_hooks' in shown:
                assert shown['custom_hooks'] == config.custom_hooks, name
            MODELS.build(copy.deepcopy(shown['model']))

    def slim_files(ns):
        # what SlimExportHook writes after training: slim.yaml and slim.pth
        from razorlib.pruning import L1NormPruner
        ns['architecture_cfg'] = ns['architecture']
        supernet = MODELS.build(ns['architecture'])
        pruner = L1NormPruner(ratio=0.5)
        pruner.prepare_from_supernet(supernet, torch.randn(1, 3, 16, 16))
        pruner.set_subnet(pruner.sample_subnet())
        work_dir = in_tmp / 'work_dirs' / 'ite_prune_plaincnn_digits'
        work_dir.mkdir(parents=True)
        pruner.export_subnet().dump(work_dir / 'slim.yaml')
        ns['deployed'] = pruner.deploy_subnet(supernet, work_dir / 'slim.yaml').eval()
        torch.save(ns['deployed'].state_dict(), work_dir / 'slim.pth')

    def rebuilt(ns):
        image = torch.randn(2, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(ns['slim'].eval()(image), ns['deployed'](image))

    run_page('pruning.md', namespace, count=9, not_run=(5, ),
             before={3: llm, 6: complexity, 7: algorithms, 8: slim_files},
             after={0: one_call, 1: step_by_step, 2: scores, 3: half_the_mlp,
                    4: half_the_mlp, 6: counted, 7: algorithm_configs, 8: rebuilt})


# ---------------------------------------------------------------------------------------
# models.md

def test_models_page(tmp_path):
    from mmengine.config import Config
    from mmengine.runner import Runner

    def shape(ns):
        assert ns['_'] == torch.Size([2, 10])  # what the comment says

    namespace = run_page('models.md', {}, count=3, after={1: shape})
    # "Run it with Runner.from_cfg(Config.fromfile(path))": two iterations of it
    path = tmp_path / 'digits_resnet18.py'
    path.write_text(page_blocks('models.md')[2][1])
    cfg = Config.fromfile(str(path))
    assert cfg.model == namespace['model']
    cfg.work_dir = str(tmp_path / 'work_dir')
    cfg.train_cfg = dict(by_epoch=False, max_iters=2, val_interval=2)
    cfg.param_scheduler = None
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        loader.update(batch_size=8, num_workers=0)
    cfg.default_hooks = dict(logger=dict(type='LoggerHook', interval=1))
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert 'val/accuracy/top5' in runner.message_hub.log_scalars


# ---------------------------------------------------------------------------------------
# datasets.md

def test_datasets_page(in_tmp):
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    from PIL import Image

    from razorlib.datasets import DigitsDataset
    from razorlib.registry import DATASETS

    # the schematic item (not run) holds for every dataset; DigitsDataset's here
    item = DigitsDataset('train')[5]
    assert item['inputs'].dtype == torch.float32 and item['inputs'].dim() == 3
    assert 0 <= item['inputs'].min() and item['inputs'].max() <= 1
    sample = item['data_samples']
    assert sample.gt_label.shape == (1, ) and sample.metainfo['sample_idx'] == 5

    def loader(ns):
        cfg = dict(ns['train_dataloader'], num_workers=0)
        with DefaultScope.overwrite_default_scope('razorlib'):  # the configs' default_scope
            batch = next(iter(Runner.build_dataloader(cfg)))
            assert batch['inputs'].shape == (64, 3, 8, 8)  # default_collate stacks NCHW
            cfg['collate_fn'] = dict(type='pseudo_collate')  # the comment's alternative
            batch = next(iter(Runner.build_dataloader(cfg)))
        assert len(batch['inputs']) == 64 and batch['inputs'][0].shape == (3, 8, 8)

    def cifar(ns):  # a two-image stand-in of each batch file
        root = in_tmp / 'data' / 'cifar10'
        root.mkdir(parents=True)
        for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
            batch = {'data': np.zeros((2, 3072), np.uint8), 'labels': [0, 1]}
            (root / name).write_bytes(pickle.dumps(batch))

    def cifar_built(ns):
        dataset = DATASETS.build(ns['_'])
        assert len(dataset) == 10 and dataset[0]['inputs'].shape == (3, 32, 32)
        with pytest.raises(FileNotFoundError, match='data_batch_1'):
            DATASETS.build(dict(ns['_'], data_root='data/nowhere'))

    def folder(ns):
        for cls in ('daisy', 'rose'):
            (in_tmp / 'data/flowers/train' / cls).mkdir(parents=True)
            Image.new('RGB', (40, 30)).save(in_tmp / 'data/flowers/train' / cls / 'a.png')

    def folder_built(ns):
        dataset = DATASETS.build(ns['_'])
        assert dataset[1]['inputs'].shape == (3, 64, 64)
        assert dataset.metainfo['classes'] == ('daisy', 'rose')

    run_page('datasets.md', {}, count=4, not_run=[0], before={2: cifar, 3: folder},
             after={1: loader, 2: cifar_built, 3: folder_built})


# ---------------------------------------------------------------------------------------
# search.md, tools/search.md, tools/train.md: config snippets

class _Assignments(dict):
    """Module-level names of an ``exec``: keeps every value assigned, not the last only."""

    def __init__(self):
        super().__init__()
        self.assigned = []

    def __setitem__(self, key, value):
        self.assigned.append((key, value))
        super().__setitem__(key, value)


def test_search_page():
    namespace = run_page('search.md', {}, count=4)
    loops = _Assignments()
    for _, code, _ in page_blocks('search.md'):
        exec(code, {}, loops)
    cfgs = [value for key, value in loops.assigned if key in ('search_cfg', 'val_cfg')]
    assert len(cfgs) == 5
    for cfg in cfgs:
        loop_takes(cfg)
    assert cfgs[1]['score_rule'] == 'less' and cfgs[2]['tie_break_key'] == 'accuracy/nll'
    assert namespace['val_evaluator']['nll'] is True
    from razorlib.evaluation import Accuracy
    Accuracy(**{k: v for k, v in namespace['val_evaluator'].items() if k != 'type'})


def test_tools_search_page():
    from mmengine.config import Config
    namespace = run_page('tools/search.md', {}, count=1)
    loop_takes(namespace['search_cfg'])
    # the shown config is the shipped one, less its comments and scoring settings
    shipped = Config.fromfile(
        str(REPO / 'configs/pruning/autoslim/autoslim_plaincnn_digits_search.py'))
    for key, value in namespace['search_cfg'].items():
        assert shipped.search_cfg[key] == value, key
    assert shipped.custom_hooks == namespace['custom_hooks']


def test_tools_train_page():
    run_page('tools/train.md', {}, count=1, not_run=[0])


# ---------------------------------------------------------------------------------------
# layer_kinds.md (the first block; the worked example has its own test)

def test_layer_kinds_page_first_block():
    (line, code, reason), example = page_blocks('layer_kinds.md')
    assert reason is None and 'class ScaledLinearKind' in example[1]
    *lines, last = code.strip().splitlines()
    namespace = {}
    run_block('layer_kinds.md', line, '\n'.join(lines), namespace)
    assert repr(namespace['_']) == 'ConvKind()'  # what the comment says
    run_block('layer_kinds.md', line + len(lines), last, namespace)
    assert namespace['_'](nn.Conv2d(8, 16, 3), 'out').shape[0] == 16  # a criterion reads it


# ---------------------------------------------------------------------------------------
# tracing_rules.md

def test_tracing_rules_page(capsys):
    from razorlib.models import ResNet
    model = ResNet(depth=18, base_channels=8, num_classes=10).eval()
    namespace = run_page('tracing_rules.md', dict(model=model), count=1)
    printed = capsys.readouterr().out
    assert printed.startswith('prunable groups:') and 'not prunable:' in printed
    assert namespace['groups'].prunable


# ---------------------------------------------------------------------------------------
# getting_started.md and tools/prune.md: the digits AutoSlim supernet

def test_getting_started_page(in_tmp, capsys):
    run_page('getting_started.md', {}, count=1)
    assert capsys.readouterr().out.strip() == 'FLOPs 1.30M, params 33.63k'
    assert (in_tmp / 'work_dirs' / 'half.yaml').exists()


def test_tools_prune_page(in_tmp):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    from razorlib.registry import MODELS

    # what ``tools/prune.py ... --work-dir work_dirs/half`` writes: channel_cfg.yaml and
    # slim.pth, from a supernet at half of every layer (getting_started.md)
    init_default_scope('razorlib')
    cfg = Config.fromfile('configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py')
    supernet = MODELS.build(cfg.model)
    supernet.pruner.set_channel_bins(
        {space: torch.ones(6) for space in supernet.pruner.channel_spaces}, 12)
    work_dir = in_tmp / 'work_dirs' / 'half'
    work_dir.mkdir(parents=True)
    supernet.export_subnet().dump(work_dir / 'channel_cfg.yaml')
    slim = supernet.pruner.deploy_subnet(MODELS.build(cfg.model.architecture),
                                         work_dir / 'channel_cfg.yaml').eval()
    torch.save(slim.state_dict(), work_dir / 'slim.pth')

    namespace = run_page('tools/prune.md', {}, count=1)
    image = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(namespace['model'].eval()(image), slim(image))
