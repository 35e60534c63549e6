"""PTQSettings: a config's ``ptq`` section checked, overridden and turned into API arguments."""
import json

import pytest

from razorlib.quantization import DEFAULT_PASSES, ExportFormat, PTQSettings


def test_defaults_are_the_apis():
    settings = PTQSettings()
    assert settings.quantize_kwargs() == dict(
        platform='TRT_INT8', observer='percentile', dispatcher='conservative', calib_steps=32,
        dynamic_batch=True, passes=DEFAULT_PASSES, ptq_passes=())
    assert settings.export_format is ExportFormat.QDQ_ONNX


def test_a_section_with_dicts_and_overrides():
    section = dict(platform='ort_int8', observer=dict(type='KLObserver'),
                   dispatcher=dict(type='aggressive'), export=dict(type='TRT_JSON'))
    settings = PTQSettings.from_config(section, observer='mse', calib_steps=None)
    assert (settings.platform, settings.observer, settings.calib_steps) == ('ORT_INT8', 'mse', 32)
    assert settings.export_format is ExportFormat.TRT_JSON
    assert json.loads(json.dumps(settings.to_dict()))['dispatcher'] == {'type': 'aggressive'}
    assert settings.describe() == ['ORT_INT8', 'mse activations', 'aggressive dispatch',
                                   'dynamic batch', 'TRT_JSON export']


@pytest.mark.parametrize('section, error, message', [
    (dict(observers='kl'), KeyError, 'ptq.observers: no such setting; the settings are '
     'platform, observer'),
    (dict(platform='FP32'), ValueError, "ptq.platform: 'FP32' is not a quantized platform"),
    (dict(observer='median'), KeyError, "no observer 'median'"),
    (dict(dispatcher=dict(type='greedy')), KeyError, "ptq.dispatcher: no dispatcher 'greedy'"),
    (dict(export='PNG'), ValueError, "ptq.export: 'PNG' is no export format"),
    (dict(calib_steps=0), ValueError, 'ptq.calib_steps must be at least 1'),
])
def test_mistakes_name_the_setting(section, error, message):
    with pytest.raises(error, match=message):
        PTQSettings.from_config(section)
