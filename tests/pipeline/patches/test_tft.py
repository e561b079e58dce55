"""The patch to TFT: the questions TFX's Transform executor asks of the preprocessing
function share one trace, and get TFT's own answers, within the run only."""

import inspect

import pytest
import tensorflow_transform as tft
from tensorflow_transform import impl_helper, inspect_preprocessing_fn
from tensorflow_transform.beam import analysis_graph_builder, analyzer_cache

from components.model import features
from components.model.preprocessing import preprocessing_fn
from pipeline.patches import machinery
from pipeline.patches import tft as tft_patches


def _specs(include_label: bool = True):
    """The raw features' type specs, as TFX's executor hands them (its TFXIO's `OriginalTypeSpecs`)."""
    return impl_helper.get_type_specs_from_feature_specs(features.raw_feature_spec(include_label=include_label))


def _answers(specs):
    """TFX's questions, in its executor's order (`Transform`, then `_RunBeamImpl` and its
    `_OptimizeRun`), as it asks them of this pipeline's preprocessing function (TF1
    graphs); then the first again, which must find the analyzers' sinks the cache
    planning took out of the graph."""
    return (tft.get_analyze_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True),
            tft.get_analyze_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True),
            tft.get_transform_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True),
            analysis_graph_builder.get_analysis_cache_entry_keys(
                preprocessing_fn, specs, [analyzer_cache.DatasetKey("data")], True),
            tft.get_analyze_input_columns(preprocessing_fn, specs, force_tf_compat_v1=True))


def test_tfx_s_questions_share_one_trace_and_get_tft_s_answers(monkeypatch):
    assert list(inspect.signature(impl_helper.trace_preprocessing_function).parameters) == [
        "preprocessing_fn", "input_specs", "use_tf_compat_v1", "base_temp_dir"]
    traces = []
    original = impl_helper.trace_preprocessing_function
    monkeypatch.setattr(impl_helper, "trace_preprocessing_function",
                        lambda *args, **kwargs: traces.append(1) or original(*args, **kwargs))
    theirs = _answers(_specs())
    assert len(traces) == 5  # TFT traces for every question: if not, the patch has nothing to save
    traces.clear()
    with machinery.patched(tft_patches.patches()):
        assert isinstance(inspect_preprocessing_fn.impl_helper, tft_patches.SharedTrace)
        assert isinstance(analysis_graph_builder.impl_helper, tft_patches.SharedTrace)
        ours = _answers(_specs())  # equal specs, other objects, as TFX builds them for each question
        assert len(traces) == 1
        # Other specs: traced again; feature specs (which may hold arrays): traced each time.
        tft.get_transform_input_columns(preprocessing_fn, _specs(include_label=False), force_tf_compat_v1=True)
        assert len(traces) == 2
        _answers(features.raw_feature_spec(include_label=True))
        assert len(traces) == 7
    assert ours == theirs and set(theirs[2]) >= set(theirs[0]) > set() and theirs[4] == theirs[0]
    assert len(theirs[3]) >= len(features.FEATURES) // 2  # a cache entry per analyzer
    assert inspect_preprocessing_fn.impl_helper is impl_helper and analysis_graph_builder.impl_helper is impl_helper


@pytest.fixture(scope="module")
def tf1_transform_output(tmp_path_factory):
    """A Transform graph written in TF1 mode, as the pipeline's Transform writes it: a
    required float, an optional string (sparse) and a label, with two analyzers."""
    import tensorflow as tf
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    spec = {"x": tf.io.FixedLenFeature([], tf.float32), "word": tf.io.VarLenFeature(tf.string),
            "label": tf.io.FixedLenFeature([], tf.float32)}

    def preprocessing_fn(inputs):
        return {"x_xf": tft.scale_to_z_score(inputs["x"]),
                "word_xf": tft.compute_and_apply_vocabulary(
                    tft.sparse_tensor_to_dense_with_shape(inputs["word"], [None, 1], default_value="")),
                "label_xf": inputs["label"]}

    rows = [{"x": float(i), "word": ["ab"[i % 2]], "label": float(i % 2)} for i in range(8)]
    output_dir = str(tmp_path_factory.mktemp("tf1_transform"))
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    with tft_beam.Context(temp_dir=str(tmp_path_factory.mktemp("tft_tmp")), force_tf_compat_v1=True):
        transform_fn = (rows, metadata) | tft_beam.AnalyzeDataset(preprocessing_fn)
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    return output_dir


@pytest.mark.timeout(120)
def test_the_transform_graph_is_pruned_once_per_set_of_inputs_with_tft_s_results(monkeypatch, tf1_transform_output):
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.eager import wrap_function

    prunes = []
    original = wrap_function.WrappedFunction.prune

    def prune(self, feeds, *args, **kwargs):
        prunes.append([getattr(feed, "name", None) for feed in feeds])
        return original(self, feeds, *args, **kwargs)

    monkeypatch.setattr(wrap_function.WrappedFunction, "prune", prune)
    x = tf.constant([1.0, 5.0])
    word = tf.sparse.from_dense(tf.constant([["a"], [""]]))
    label = tf.constant([0.0, 1.0])

    def applications():
        """The graph applied as the Trainer applies it: the same inputs in two orders, then
        without the label; each in a graph of its own, as each of its functions."""
        layer = tft.TFTransformOutput(tf1_transform_output).transform_features_layer()
        del prunes[:]  # loading prunes the signature once, patched or not
        results = []
        for inputs in ({"x": x, "word": word, "label": label}, {"label": label, "word": word, "x": x},
                       {"word": word, "x": x}):
            traced = tf.function(lambda feed: layer(feed), autograph=False)
            results.append({name: value.numpy() for name, value in traced(inputs).items()})
        return results

    theirs = applications()
    assert len(prunes) == 3  # TFT prunes for every application: if not, the patch has nothing to save
    # The same inputs in another order reach the graph in another order: the patch reorders them.
    assert prunes[0] != prunes[1] and sorted(prunes[0]) == sorted(prunes[1])
    with machinery.patched(tft_patches.patches()):
        ours = applications()
        assert len(prunes) == 2
    assert [sorted(r) for r in ours] == [sorted(r) for r in theirs] == [["label_xf", "word_xf", "x_xf"]] * 2 + [
        ["word_xf", "x_xf"]]
    for mine, tft_s in zip(ours, theirs):
        for name in tft_s:
            np.testing.assert_array_equal(mine[name], tft_s[name])
    assert theirs[0]["x_xf"].tolist() != theirs[0]["label_xf"].tolist()  # the inputs reached their outputs
