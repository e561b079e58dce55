"""SpanWindow: picks the rolling window of spans when the pipeline runs, not when it is built.

ImportExampleGen reads its `input_config` from this component's output, one input split
per span of the window (see `components.spans.window`). A pipeline compiled once for
Kubeflow Pipelines / Vertex AI and run on a schedule therefore trains on the newest spans
of each run's day. TFX 1.16 offers no other way that compiles there: ExampleGen's
`range_config` ingests exactly one span per execution, and a resolver that gathers
several Examples artifacts (`SpanRangeStrategy`, or `LatestArtifactStrategy` for more than
one artifact) is refused by `KubeflowV2DagRunner`.

The component must run on every pipeline run (its parameters alone say nothing of the
data): the runners turn its cache off (`NODE_ID`).
"""

from typing import List, Tuple

from tfx import v1 as tfx
from tfx.dsl.io import fileio
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components import spans

NODE_ID = "SpanWindow"
# Output keys: ImportExampleGen's input_config (JSON), and the spans chosen ("10,11,12").
INPUT_CONFIG_KEY = "input_config"
SPANS_KEY = "spans_used"


def current_window(data_root: str, window_size: int) -> List[Tuple[str, int]]:
    """`(split name, span)` of the newest `window_size` spans under `data_root`."""
    if not fileio.isdir(data_root):
        raise spans.WindowError(f"data root {data_root} does not exist or is not a folder")
    available = [span for span, _ in spans.numbered(fileio.listdir(data_root))]
    return spans.window(available, window_size)


def window_input_config(chosen: List[Tuple[str, int]]) -> tfx.proto.Input:
    """One ExampleGen input split per span of the window."""
    return tfx.proto.Input(
        splits=[tfx.proto.Input.Split(name=name, pattern=spans.files_pattern(span)) for name, span in chosen]
    )


@tfx.dsl.components.component
def SpanWindow(  # noqa: N802  (a component is named like a class)
    data_root: tfx.dsl.components.Parameter[str],
    window_size: tfx.dsl.components.Parameter[int],
    input_config: tfx.dsl.components.OutputArtifact[standard_artifacts.String],
    spans_used: tfx.dsl.components.OutputArtifact[standard_artifacts.String],
) -> None:
    """Writes ImportExampleGen's `input_config` for the newest `window_size` spans."""
    chosen = current_window(data_root, window_size)
    input_config.value = proto_utils.proto_to_json(window_input_config(chosen))
    spans_used.value = ",".join(str(span) for _, span in chosen)
