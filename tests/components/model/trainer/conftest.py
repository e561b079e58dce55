"""The exported model the tests of `export` and `tflite` share: an untrained model written
as the Trainer writes it, SavedModel and TFLite, once a session."""

import shutil

import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components.model.trainer import data, export, tflite
from components.model.trainer import model as model_lib


@pytest.fixture(scope="session")
def copied_transform_dir(tmp_path_factory, transform_output_dir):
    """A private copy of the Transform output, deleted by `exported` once it has been used."""
    copy = str(tmp_path_factory.mktemp("transform_copy") / "transform")
    shutil.copytree(transform_output_dir, copy)
    return copy


@pytest.fixture(scope="session")
def copied_transform_output(copied_transform_dir):
    return tft.TFTransformOutput(copied_transform_dir)


@pytest.fixture(scope="session")
def exported(tmp_path_factory, copied_transform_dir, copied_transform_output, examples_file, rows, to_example):
    """An untrained model exported, with its TFLite twin, over the copied Transform output,
    which is then deleted. The input pipeline ran on the same output first, as in the Trainer."""
    data.transformed_rows([examples_file], data.transform_fn(copied_transform_output))
    export_dir = str(tmp_path_factory.mktemp("export") / "1")
    model = model_lib.build_model()
    export.export_serving_model(model, copied_transform_output, export_dir)
    tflite.write_tflite(model, copied_transform_output, export_dir)
    written = export.write_warmup_requests(export_dir, (to_example(r) for r in rows), "big_tip", limit=25)
    shutil.rmtree(copied_transform_dir)  # the export must not need it any more
    return export_dir, written


@pytest.fixture(scope="session")
def loaded(exported):
    return tf.saved_model.load(exported[0])
