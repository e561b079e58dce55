"""SpanWindow: the spans a run ingests, chosen when the pipeline runs, not when it is built.

It lists the data root once per run (through `components.spans`) and records the spans
it chose (`spans_used`), which the data gate and the run report read: every later node
works on that one listing, even when a span lands while the run is going.

In window mode it also writes ImportExampleGen's `input_config`: one input split per span
of the newest `window_size` (see `components.spans.window`), so a pipeline compiled once
for Kubeflow Pipelines / Vertex AI and run on a schedule trains on the newest spans of each
run's day. TFX 1.16 offers no other way that compiles there: ExampleGen's `range_config`
ingests exactly one span per execution, and a resolver that gathers several Examples
artifacts (`SpanRangeStrategy`, or `LatestArtifactStrategy` for more than one artifact) is
refused by `KubeflowV2DagRunner`. With `window_size` 0 every span is ingested as one
`all` split (ExampleGen hash-splits it).

The component must run on every pipeline run (its parameters alone say nothing of the
data): the runners turn its cache off (`NODE_ID`, see `pipeline.compiled_fixes`).
"""

from typing import List, Tuple

from tfx import v1 as tfx
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components import spans

NODE_ID = "SpanWindow"
# Output keys: ImportExampleGen's input_config (JSON), and the spans chosen ("10,11,12").
INPUT_CONFIG_KEY = "input_config"
SPANS_KEY = "spans_used"
ALL_SPANS_SPLIT = "all"


def current_window(data_root: str, window_size: int) -> List[Tuple[str, int]]:
    """`(split name, span)` of the newest `window_size` spans under `data_root`."""
    return spans.window(spans.span_numbers(data_root), window_size)


def window_input_config(chosen: List[Tuple[str, int]]) -> tfx.proto.Input:
    """One ExampleGen input split per span of the window."""
    return tfx.proto.Input(
        splits=[tfx.proto.Input.Split(name=name, pattern=spans.files_pattern(span)) for name, span in chosen]
    )


def all_spans_input_config() -> tfx.proto.Input:
    """Every file of every span as one split."""
    return tfx.proto.Input(splits=[tfx.proto.Input.Split(name=ALL_SPANS_SPLIT, pattern=spans.ALL_SPANS_PATTERN)])


def parse_spans(value: str) -> List[int]:
    """The span numbers of a `spans_used` value, oldest first."""
    return [int(span) for span in value.split(",") if span]


@tfx.dsl.components.component
def SpanWindow(  # noqa: N802  (a component is named like a class)
    data_root: tfx.dsl.components.Parameter[str],
    window_size: tfx.dsl.components.Parameter[int],
    input_config: tfx.dsl.components.OutputArtifact[standard_artifacts.String],
    spans_used: tfx.dsl.components.OutputArtifact[standard_artifacts.String],
) -> None:
    """Writes ImportExampleGen's `input_config` and the spans it covers."""
    if window_size:
        chosen = current_window(data_root, window_size)
        config = window_input_config(chosen)
        numbers = [span for _, span in chosen]
    else:
        config, numbers = all_spans_input_config(), spans.span_numbers(data_root)
    input_config.value = proto_utils.proto_to_json(config)
    spans_used.value = ",".join(str(span) for span in numbers)
