"""tools/pipeline.py end to end (one epoch per training step): every tool runs in turn
and the table pairs each searched subnet with a uniform-width subnet of the same FLOPs."""
import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).parents[2] / 'tools' / 'pipeline.py'


def test_pipeline_runs_every_step_and_pairs_subnets_with_uniform_baselines(tmp_path):
    spec = importlib.util.spec_from_file_location('pipeline_tool', TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(['--work-dir', str(tmp_path), '--supernet-epochs', '1',
                      '--finetune-epochs', '1', '--seeds', '2']) == 0
    result = json.loads((tmp_path / 'pipeline.json').read_text())
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
    log = (tmp_path / 'pipeline.log').read_text()
    assert 'uniform, same FLOPs' in log and 'searched 1.20M' in log
    assert 'top-1 of each fine-tune seed' in log
    assert (tmp_path / 'subnet0' / 'finetune_seed1').is_dir()
