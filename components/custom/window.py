"""SpanWindow: the spans a run ingests, chosen when the pipeline runs, not when it is built.

It lists the data root once per run (through `components.support.spans`) and records the spans
it chose (`spans_used`), which the data gate and the run report read: every later node
works on that one listing, even when a span lands while the run is going.

In window mode it also writes ImportExampleGen's `input_config`: one input split per span
of the newest `window_size` (see `components.support.spans.window`), so a pipeline compiled once
for Kubeflow Pipelines / Vertex AI and run on a schedule trains on the newest spans of each
run's day. TFX 1.16 offers no other way that compiles there: ExampleGen's `range_config`
ingests exactly one span per execution, and a resolver that gathers several Examples
artifacts (`SpanRangeStrategy`, or `LatestArtifactStrategy` for more than one artifact) is
refused by `KubeflowV2DagRunner`. With `window_size` 0 every span is ingested as one
`all` split (ExampleGen hash-splits it).

Caching. Its `listing` parameter is the span folders the local runner found when it
planned the run (`"span-12,span-13,span-016"`): the node is cached while they stay the same, so its
outputs, and everything downstream that did not change, are reused (a re-run after a
crash, `--force`, an edit to the model code). ExampleGen still fingerprints the files
themselves. A compiled pipeline cannot know the spans of a future run: it passes "",
and `pipeline.cloud.compiled_fixes` turns this node's cache off and makes the job's id one of
its inputs, so it runs on every job even when the job is submitted with caching forced
on (`aiplatform.PipelineJob(..., enable_caching=True)` overrides per-task settings).
"""

import logging
import os
from typing import List, Tuple

from google.protobuf import json_format
from tfx.dsl.component.experimental.annotations import OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts

from components.custom import baseline, model_card, recorded
from components.support import registry, serving_config, source, spans

# Output keys: ImportExampleGen's input_config (JSON), and the spans chosen
# (`spans.format_numbers`: "10,11,12").
INPUT_CONFIG_KEY = "input_config"
SPANS_KEY = recorded.SPANS_USED_KEY
# 1 when a candidate trained on this window would be a new one (or no record is asked
# about), else 0: the data gate's `fresh` parameter (`serving_config.decide`).
FRESH_KEY = "fresh"
# The candidate's inputs (`registry.inputs_digest`), which the Pusher records.
INPUTS_KEY = "inputs_used"
# The version that serves (`baseline.serving_now`): in a compiled pipeline the serving
# baseline's cache key, read on every job.
SERVING_KEY = "serving_version"
# The parameter a compiled pipeline sets to the pipeline job's id (see `SpanWindow`).
JOB_PARAMETER = "job"
ALL_SPANS_SPLIT = "all"


def check_image_code(compiled: str) -> None:
    """Raises when this container's `components` package is not the one a compiled job was
    compiled with (`compiled`; "" checks nothing): the image was rebuilt since, and the
    job's cache keys, its candidates' inputs and what it decides would be the old code's."""
    here = source.of_components()
    if compiled and compiled != here:
        raise ValueError(
            f"this job was compiled for the pipeline's code {compiled}, and its image holds other code ({here}): "
            "the image was rebuilt since `taxi-pipeline compile`. Compile again for this image (its own "
            "`taxi-pipeline compile`), or run the image the job was compiled for; nothing was ingested, trained or "
            "pushed"
        )


def _refuse_a_placeholder(job: str) -> None:
    if job.startswith("{{$"):
        raise ValueError(
            f"the pipeline job's id reached this task as the placeholder {job}: this backend does not resolve "
            "KFP placeholders, and with caching forced on the window would never move; run on Vertex AI "
            "Pipelines or a Kubeflow Pipelines backend that resolves them"
        )


def current_window(data_root: str, window_size: int) -> List[Tuple[str, int, str]]:
    """`(split name, span, folder name)` of the newest `window_size` spans under `data_root`."""
    folders = dict(spans.span_folders(data_root))
    return [(name, span, folders[span]) for name, span in spans.window(list(folders), window_size)]


def window_input_config(chosen: List[Tuple[str, int, str]]) -> example_gen_pb2.Input:
    """One ExampleGen input split per span of the window."""
    return example_gen_pb2.Input(
        splits=[
            example_gen_pb2.Input.Split(name=name, pattern=spans.relative_pattern(folder_name))
            for name, _, folder_name in chosen
        ]
    )


def all_spans_input_config() -> example_gen_pb2.Input:
    """Every file of every span as one split."""
    return example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name=ALL_SPANS_SPLIT, pattern=spans.ALL_SPANS_PATTERN)]
    )


@component
def SpanWindow(  # a component is named like a class
    data_root: Parameter[str],
    window_size: Parameter[int],
    listing: Parameter[str],
    input_config: OutputArtifact[standard_artifacts.String],
    spans_used: OutputArtifact[standard_artifacts.String],
    fresh: OutputArtifact[standard_artifacts.Integer],
    inputs_used: OutputArtifact[standard_artifacts.String],
    serving_version: OutputArtifact[standard_artifacts.String],
    job: Parameter[str] = "",
    model_dir: Parameter[str] = "",
    inputs: Parameter[str] = "",
    static_inputs: Parameter[str] = "",
    code_version: Parameter[str] = "",
) -> None:
    """Writes ImportExampleGen's `input_config` and the spans it covers.

    `listing` is the cache key (see the module doc); when given, the spans chosen must be
    those, or the data changed after the run was planned and the run stops, naming both.
    `job` is only checked: in a compiled pipeline it is the pipeline job's id (see
    `pipeline.cloud.compiled_fixes`), so no two jobs share this node's cache key.
    `inputs` is the candidate's inputs as the local run planned them (a late file in a span
    changes them, not the listing); "" in a compiled pipeline, where they are computed here
    from `static_inputs` (the code and the settings that reach Transform or the Trainer),
    this container's libraries and the window's files (`registry.inputs_digest`).
    `model_dir`, given, is the model's folder in the serving folder: `fresh` is 0 when its
    record says a candidate of these inputs serves or was the newest (`serving_config.decide`),
    so the gate stops a job that has nothing new to train on, and `serving_version` is
    the version that serves there (`registry.NOTHING_SERVES` without `model_dir`).
    `code_version` (a compiled pipeline's): the code it was compiled for (`check_image_code`).
    """
    check_image_code(code_version)
    _refuse_a_placeholder(job)
    if window_size:
        chosen = current_window(data_root, window_size)
        config = window_input_config(chosen)
        numbers = [span for _, span, _ in chosen]
        folders = [folder_name for _, _, folder_name in chosen]
    else:
        found = spans.span_folders(data_root)
        config, numbers, folders = all_spans_input_config(), [n for n, _ in found], [f for _, f in found]
    spans.refuse_strays(data_root)  # as a local run's check of the data does
    now = ",".join(folders)
    if listing and listing != now:
        raise ValueError(
            f"the span folders under {data_root} changed after this run was planned (planned {listing}, now {now}); "
            "run again"
        )
    input_config.value = json_format.MessageToJson(config, sort_keys=True, preserving_proto_field_name=True)
    spans_used.value = spans.format_numbers(numbers)
    if not inputs:
        files = [path for span in spans.list_spans(data_root, only=numbers) for path, _ in span.files]
        inputs = registry.inputs_digest(static_inputs, registry.runtime_versions(), spans.files_digest(files))
    inputs_used.value = inputs
    fresh.value = _fresh(model_dir, inputs) if model_dir else 1
    serving_version.value = baseline.serving_now(model_dir) if model_dir else registry.NOTHING_SERVES


def _fresh(model_dir: str, inputs: str) -> int:
    """0 when the model's record decides a run of `inputs` already (`serving_config.decide`:
    a candidate of them serves, was the newest, or was rejected), else 1; an error, as a
    local run's plan raises, when the model is pinned to a version that is gone."""
    serving_config.refuse_a_lost_pin(model_dir)
    decision = serving_config.decide(model_dir, inputs)
    if decision is None:
        return 1
    logging.info("nothing new to train: %s", decision.says)
    return 0


def trained_on(model_dir: str) -> List[int]:
    """The spans the newest candidate of the model in `model_dir` was trained on, as its
    record says (whatever became of it: a job after it with no new span trains nothing),
    else those of the version serving there, as its model card says; [] when neither is known."""
    newest = registry.read(model_dir).newest
    if newest is not None:
        return sorted(newest.spans)
    serving = serving_config.state_of(model_dir).serving
    card = model_card.read(os.path.join(model_dir, str(serving))) if serving is not None else None
    return sorted((card or {}).get("training_data", {}).get("spans", []))
