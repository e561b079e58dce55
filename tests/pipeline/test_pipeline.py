"""`create_pipeline(...)`: the splits each node reads, the node ids the report reads."""


from google.protobuf import wrappers_pb2
from tfx.proto import example_gen_pb2

from components.custom.recorded import NodeId
from components.support import source
from pipeline import config
from pipeline import pipeline as pipeline_lib
from pipeline.run import local_runner


def test_transform_and_trainer_read_the_window_splits():
    splits = pipeline_lib.window_splits(3)
    assert splits.train == ("train_2", "train_1") and splits.eval == "eval"
    assert pipeline_lib.window_splits(None).train == ("train",)


def test_the_nodes_other_code_names_have_the_ids_it_names_them_by(tmp_path):
    run_config = config.RunConfig(output_root=str(tmp_path)).resolved()
    ids = {component.id for component in local_runner.build_pipeline(run_config, ["span-1", "span-2"]).components}
    expected = {value for name, value in vars(NodeId).items() if not name.startswith("_")}
    assert len(expected) == 12 and expected <= ids


def test_transform_writes_no_analyzer_cache_that_no_run_would_read(tmp_path):
    run_config = config.RunConfig(output_root=str(tmp_path)).resolved()
    transform = next(
        component for component in local_runner.build_pipeline(run_config, ["span-1", "span-2"]).components
        if component.id == NodeId.TRANSFORM
    )
    assert set(transform.outputs) == {"transform_graph"}
    assert "analyzer_cache" not in transform.inputs


def test_every_cached_node_that_runs_this_package_is_keyed_by_its_code(tmp_path):
    """TFX's cache key names a node's executor class, not its code: without the package's
    fingerprint in its properties an edited gate, check or Pusher would be skipped as cached."""
    import json

    run_config = config.RunConfig(output_root=str(tmp_path)).resolved()
    built = local_runner.build_pipeline(run_config, ["span-1", "span-2"])
    version = source.of_components()
    keyed = {}
    for node in built.components:
        properties = node.exec_properties
        custom = properties.get("custom_config")
        if isinstance(custom, example_gen_pb2.CustomConfig):  # ImportExampleGen's, a packed string
            value = wrappers_pb2.StringValue()
            assert custom.custom_config.Unpack(value)
            custom = {pipeline_lib.CODE_VERSION: value.value}
        custom = json.loads(custom) if isinstance(custom, str) else (custom or {})
        keyed[node.id] = properties.get(pipeline_lib.CODE_VERSION) or custom.get(pipeline_lib.CODE_VERSION)
    ours = ("ImportExampleGen", "ImportSchemaGen", "DataGate", "Transform", "Trainer", "ServingCheck", "ShadowCheck",
            "Pusher")
    assert {node: keyed.get(node) for node in ours} == {node: version for node in ours}
