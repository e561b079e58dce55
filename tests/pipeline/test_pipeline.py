"""`create_pipeline(...)`: the splits each node reads, the node ids the report reads."""

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
    expected = {value for name, value in vars(pipeline_lib.NodeId).items() if not name.startswith("_")}
    assert len(expected) == 9 and expected <= ids


def test_transform_writes_no_analyzer_cache_that_no_run_would_read(tmp_path):
    run_config = config.RunConfig(output_root=str(tmp_path)).resolved()
    transform = next(
        component for component in local_runner.build_pipeline(run_config, ["span-1", "span-2"]).components
        if component.id == "Transform"
    )
    assert set(transform.outputs) == {"transform_graph"}
    assert "analyzer_cache" not in transform.inputs
