"""The patch to TFT: the questions TFX's Transform executor asks of the preprocessing
function share one trace, and get TFT's own answers, within the run only."""

import inspect

import tensorflow_transform as tft
from tensorflow_transform import impl_helper, inspect_preprocessing_fn

from components.model import features
from components.model.preprocessing import preprocessing_fn
from pipeline.patches import machinery
from pipeline.patches import tft as tft_patches


def _specs(include_label: bool = True):
    """The raw features' type specs, as TFX's executor hands them (its TFXIO's `OriginalTypeSpecs`)."""
    return impl_helper.get_type_specs_from_feature_specs(features.raw_feature_spec(include_label=include_label))


def _answers(specs):
    """TFX's questions, in its executor's order (`Transform` then `_RunBeamImpl`), as it
    asks them of this pipeline's preprocessing function (TF1 graphs)."""
    return (tft.get_analyze_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True),
            tft.get_analyze_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True),
            tft.get_transform_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True))


def test_tfx_s_questions_share_one_trace_and_get_tft_s_answers(monkeypatch):
    assert list(inspect.signature(impl_helper.trace_preprocessing_function).parameters) == [
        "preprocessing_fn", "input_specs", "use_tf_compat_v1", "base_temp_dir"]
    traces = []
    original = impl_helper.trace_preprocessing_function
    monkeypatch.setattr(impl_helper, "trace_preprocessing_function",
                        lambda *args, **kwargs: traces.append(1) or original(*args, **kwargs))
    theirs = _answers(_specs())
    assert len(traces) == 3  # TFT traces for every question: if not, the patch has nothing to save
    traces.clear()
    with machinery.patched(tft_patches.patches()):
        assert isinstance(inspect_preprocessing_fn.impl_helper, tft_patches.SharedTrace)
        ours = _answers(_specs())  # equal specs, other objects, as TFX builds them for each question
        assert len(traces) == 1
        # Other specs: traced again; feature specs (which may hold arrays): traced each time.
        tft.get_transform_input_columns(preprocessing_fn, _specs(include_label=False), force_tf_compat_v1=True)
        assert len(traces) == 2
        _answers(features.raw_feature_spec(include_label=True))
        assert len(traces) == 5
    assert ours == theirs and set(theirs[2]) >= set(theirs[0]) > set()
    assert inspect_preprocessing_fn.impl_helper is impl_helper
