"""Every tool's numeric flags are checked by the argparse types of razorlib.utils.cli: a
value out of range is refused by the parser (exit code 2), naming the flag, what it takes
and the value given; the values in range are taken as before."""
import pytest

from conftest import load_tool

CONFIG, CHECKPOINT = 'cfg.py', 'model.pth'
POSITIONAL = {'train': [CONFIG], 'get_flops': [CONFIG], 'pipeline': [],
              'test': [CONFIG, CHECKPOINT], 'search': [CONFIG, CHECKPOINT],
              'ptq': [CONFIG, CHECKPOINT], 'deploy': [CONFIG, CHECKPOINT],
              'prune': ['--model', 'plain_cnn']}
INTEGER = 'expected an integer of at least'


@pytest.mark.parametrize('tool, flags, message', [
    ('train', ['--threads', '0'], f"argument --threads: {INTEGER} 1, got '0'"),
    ('test', ['--threads', '-1'], f"argument --threads: {INTEGER} 1, got '-1'"),
    ('search', ['--threads', 'two'], f"argument --threads: {INTEGER} 1, got 'two'"),
    ('get_flops', ['--shape', '3', '0'], f"argument --shape: {INTEGER} 1, got '0'"),
    ('get_flops', ['--threads', '1.5'], f"argument --threads: {INTEGER} 1, got '1.5'"),
    ('ptq', ['--calib-steps', '0'], f"argument --calib-steps: {INTEGER} 1, got '0'"),
    ('deploy', ['--batch-size', '0'], f"argument --batch-size: {INTEGER} 1, got '0'"),
    ('deploy', ['--workspace', '-8'], f"argument --workspace: {INTEGER} 1, got '-8'"),
    ('deploy', ['--recalibrate-bn', '-1'], f"argument --recalibrate-bn: {INTEGER} 0, got '-1'"),
    ('prune', ['--data-batches', '0'], f"argument --data-batches: {INTEGER} 1, got '0'"),
    ('prune', ['--params', '-0.5'], "argument --params: expected a number in (0, 1], got "
     "'-0.5'"),
    # was refused only once the data was read and the work dir made
    ('prune', ['--max-ratio', '1'], "argument --max-ratio: expected a number in [0, 1), got "
     "'1'"),
    ('prune', ['--max-ratio', 'nan'], "argument --max-ratio: expected a number in [0, 1), got "
     "'nan'"),
    ('pipeline', ['--threads', '0'], f"argument --threads: {INTEGER} 1, got '0'"),
    ('pipeline', ['--seeds', '0'], f"argument --seeds: {INTEGER} 1, got '0'"),
    ('pipeline', ['--supernet-epochs', '0'], f"argument --supernet-epochs: {INTEGER} 1, got '0'"),
    ('pipeline', ['--finetune-epochs', '-1'], f"argument --finetune-epochs: {INTEGER} 1, got "
     "'-1'"),
    ('pipeline', ['--train-epochs', '0'], f"argument --train-epochs: {INTEGER} 1, got '0'"),
    ('pipeline', ['--prune-flops', '0.5', '1'], "argument --prune-flops: expected a number in "
     "(0, 1), got '1'"),
])
def test_a_value_out_of_range_is_refused_by_the_parser(tool, flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_tool(tool).parse_args([*POSITIONAL[tool], *flags])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('tool, flags, expected', [
    ('train', ['--threads', '1'], dict(threads=1)),
    ('get_flops', ['--shape', '3', '32', '32'], dict(shape=[3, 32, 32])),
    ('ptq', ['--recalibrate-bn', '0', '--top', '1'], dict(recalibrate_bn=0, top=1)),
    ('deploy', ['--batch-size', '1'], dict(batch_size=1, workspace=1024)),
    ('prune', ['--ratio', '1', '--quantile', '0', '--round-to', '1'],
     dict(ratio=1.0, quantile=0.0, round_to=1)),
    ('pipeline', ['--seeds', '1'], dict(seeds=1, threads=1, supernet_epochs=30)),
    ('pipeline', ['--from-subnet', CONFIG, '--prune-flops', '0.25', '0.5'],
     dict(prune_flops=[0.25, 0.5], threads=1)),
])
def test_values_in_range_and_the_defaults_are_taken(tool, flags, expected):
    args = load_tool(tool).parse_args([*POSITIONAL[tool], *flags])
    assert {key: getattr(args, key) for key in expected} == expected
