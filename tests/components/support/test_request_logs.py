"""Logged requests read back as tf.Examples: each format detected, each malformed record
named by file and place."""

import base64
import gzip
import json

import pytest
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_log_pb2

from components.support import request_logs
from tests.helpers import curated_schema, write_records


def _example(fare=12.5, company="Flash Cab", hour=7) -> tf.train.Example:
    example = tf.train.Example()
    example.features.feature["fare"].float_list.value.append(fare)
    example.features.feature["company"].bytes_list.value.append(company.encode())
    example.features.feature["trip_start_hour"].int64_list.value.append(hour)
    return example


def _tfrecords(path, records, compression=""):
    """Logged records at `path`, uncompressed unless `compression` says: that path, as text."""
    return str(write_records(path, records, compression))


def _read(path, file_format=None):
    return list(request_logs.read(path, file_format or request_logs.detect(path)))


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_examples_are_read_gzip_or_not_whatever_the_file_name(tmp_path, compression):
    records = [_example(fare=float(i)).SerializeToString() for i in range(3)]
    path = _tfrecords(tmp_path / "requests.log", records, compression)
    assert request_logs.detect(path) == request_logs.EXAMPLES
    assert _read(path) == [(f"record {i}", record) for i, record in enumerate(records)]


def test_prediction_logs_give_the_examples_of_predict_and_classify_requests(tmp_path):
    first, second, third = (_example(fare=float(i)).SerializeToString() for i in range(3))
    predict = predict_pb2.PredictRequest()
    predict.inputs["examples"].CopyFrom(tf.make_tensor_proto([first, second]))
    classify = classification_pb2.ClassificationRequest()
    classify.input.example_list.examples.add().CopyFrom(tf.train.Example.FromString(third))
    logs = [prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=predict)),
            prediction_log_pb2.PredictionLog(classify_log=prediction_log_pb2.ClassifyLog(request=classify)),
            prediction_log_pb2.PredictionLog()]
    path = _tfrecords(tmp_path / "predictions", [log.SerializeToString() for log in logs], "GZIP")
    assert request_logs.detect(path) == request_logs.PREDICTION_LOGS
    found = _read(path)
    # A predict request carries the examples' bytes, passed on as they are; a classify request
    # holds them parsed, and serializing a map (the features) again may order it otherwise
    # (protobuf's upb, tfx-1.21): the same example, compared as one.
    assert found[:2] == [("record 0", first), ("record 0", second)]
    assert (found[2][0], tf.train.Example.FromString(found[2][1])) == ("record 1", tf.train.Example.FromString(third))
    assert str(found[3]) == f"{path}, record 2: a PredictionLog without tf.Examples in its request"


def test_json_bodies_and_log_rows_of_every_shape_give_the_same_examples(tmp_path):
    example = _example(fare=9.0, company="Sun Taxi", hour=23)
    encoded = base64.b64encode(example.SerializeToString()).decode()
    raw = {"fare": 9.0, "company": "Sun Taxi", "trip_start_hour": 23}
    lines = [
        {"instances": [{"b64": encoded}]},  # serving_default
        {"instances": [{"examples": {"b64": encoded}}]},  # the same, the input named
        {"instances": [raw]},  # the raw-feature signature
        {"request_payload": [json.dumps(raw)], "response_payload": ["{}"]},  # Vertex AI's log row
        {"raw_data": json.dumps({"instances": [raw]})},  # AI Platform's
    ]
    path = tmp_path / "rows.json.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(line) for line in lines).encode()))
    assert request_logs.detect(str(path)) == request_logs.JSON_LINES
    found = _read(str(path))
    assert [where for where, _ in found] == [f"line {n}" for n in range(1, 6)]
    assert all(tf.train.Example.FromString(record) == example for _, record in found)


def test_malformed_records_are_named_and_the_rest_are_read(tmp_path):
    good = _example().SerializeToString()
    path = tmp_path / "rest.jsonl"
    path.write_text("\n".join([
        json.dumps({"instances": [{"b64": base64.b64encode(good).decode()}]}),
        "not json at all",
        json.dumps({"instances": [{"b64": "%%%"}]}),
        json.dumps({"instances": [{"fare": "twelve"}]}),
        json.dumps({"instances": [{"tip": 3.0}]}),
        json.dumps({"predictions": []}),
        "",
        json.dumps({"instances": [{"trip_start_hour": 7.5}]}),
    ]))
    found = _read(str(path))
    assert found[0] == ("line 1", good)
    problems = [str(item) for item in found[1:]]
    assert problems == [
        f"{path}, line 2: Expecting value: line 1 column 1 (char 0)",
        f"{path}, line 3: its b64 value is not base64",
        f"{path}, line 4: feature 'fare' has a value of the wrong type: 'twelve'",
        f"{path}, line 5: unknown feature 'tip'",
        f"{path}, line 6: no 'instances', 'request_payload' or 'raw_data'",
        f"{path}, line 8: feature 'trip_start_hour' has a value of the wrong type: 7.5",
    ]


def test_a_damaged_tfrecord_file_keeps_its_whole_records_and_names_where_it_breaks(tmp_path):
    records = [_example(fare=float(i)).SerializeToString() for i in range(5)]
    path = tmp_path / "cut.tfrecord"
    whole = open(_tfrecords(path, records), "rb").read()
    path.write_bytes(whole[:-10])
    found = _read(str(path), request_logs.EXAMPLES)
    assert found[:4] == [(f"record {i}", record) for i, record in enumerate(records[:4])]
    assert str(found[4]).startswith(f"{path}, record 4: the file is damaged from here on (")
    not_example = _tfrecords(tmp_path / "other", [b"\xff\x00garbage", _example().SerializeToString()])
    assert [str(item) if isinstance(item, request_logs.Malformed) else item[0]
            for item in _read(not_example, request_logs.EXAMPLES)] == [
        f"{not_example}, record 0: not a tf.Example", "record 1"]


def test_a_file_of_no_known_format_is_refused_naming_the_flag(tmp_path):
    unknown = _tfrecords(tmp_path / "unknown", [tf.train.Example().SerializeToString()])
    with pytest.raises(ValueError, match="name its format with --format"):
        request_logs.detect(unknown)
    empty = _tfrecords(tmp_path / "empty", [])
    with pytest.raises(ValueError, match="holds no records"):
        request_logs.detect(empty)


def test_a_record_the_schema_cannot_decode_is_named_and_the_others_are_decoded(tmp_path):
    import apache_beam as beam

    from pipeline.ops import monitor, request_beam

    wrong = tf.train.Example()
    wrong.features.feature["trip_start_hour"].float_list.value.append(7.5)
    path = _tfrecords(tmp_path / "mixed", [_example().SerializeToString(), wrong.SerializeToString(),
                                           _example(fare=3.0).SerializeToString()])
    reader = request_beam.ReadRequests(monitor.serving_schema(curated_schema()))
    reader.setup()
    found = list(reader.process((path, request_logs.EXAMPLES)))
    named = [item.value for item in found if isinstance(item, beam.pvalue.TaggedOutput)]
    batches = [item for item in found if not isinstance(item, beam.pvalue.TaggedOutput)]
    assert len(named) == 1 and named[0].startswith(f"{path}, record 1: INVALID_ARGUMENT: Feature had wrong type")
    assert sum(batch.num_rows for batch in batches) == 2
    assert "big_tip" not in batches[0].schema.names  # the label is not read as traffic
