"""The Evaluator's extractors, through TFX's `custom_extractors` hook (the Evaluator's
`module_path`): TFMA's own, after a step that keeps only the columns of each batch of
examples that the evaluation reads.

TFMA turns every column of the examples into features and then splits each batch into
one extract per example, every feature included, before slicing and the metrics' combiners;
from 300,000 rows on, those extracts also travel between Beam's worker processes. The
evaluation reads few of them: the label, the slices' features, an example weight if one
is named. Which ones is read from the eval config itself: a column is kept when its name
appears anywhere in the config (a model spec's keys, a slicing spec's features or values,
a metric's own settings), and every column is kept when the config can read features that
it does not name (slices written as SQL, a metric from a module of its own, a model's
preprocessing functions, a model signature other than the serving one, which may take
features by name) or when there is no config. The serving signature reads the serialized
examples, which stay.

The 1M-row run's Evaluator (50,000 eval rows, two Beam worker processes), the executor
alone: 21.2 s with every column, 18.6-19.7 s with the label and the two slices' columns.
"""

# No `from __future__ import annotations`: TFX reads this module's functions by name.
import json
from typing import Any, FrozenSet, Iterator, List, Optional

import apache_beam as beam
import pyarrow as pa
from google.protobuf import json_format
from tensorflow_model_analysis import constants
from tensorflow_model_analysis.api import model_eval_lib
from tensorflow_model_analysis.extractors import extractor

from components.model.trainer.settings import SERVING_SIGNATURE

# The stage that keeps the columns read, ahead of TFMA's own.
STAGE_NAME = "KeepColumnsRead"
# Settings under which the evaluation reads features the config need not name.
_READS_ANY_FEATURE = ("slice_keys_sql", "module", "preprocessing_function_names")


def columns_read(eval_config: Any) -> Optional[FrozenSet[str]]:
    """The names in `eval_config` (an `EvalConfig`) that may be features: every string,
    key or value, anywhere in it, a metric's JSON settings included; None when the
    evaluation may read features it does not name."""
    if any(spec.signature_name not in ("", SERVING_SIGNATURE) for spec in eval_config.model_specs):
        return None
    config = json_format.MessageToDict(eval_config, preserving_proto_field_name=True)
    names = set()
    for key, value in _items(config):
        if key in _READS_ANY_FEATURE and value:
            return None
        names.add(key)
        if isinstance(value, str):
            names.add(value)
    return frozenset(names)


def _items(value: Any, key: str = "") -> Iterator[tuple]:
    """`(key, value)` of every node of a JSON-like value, a metric's `config` (JSON text,
    its outer braces optional, as TFMA reads it) read as JSON."""
    if key == "config" and isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text if text.startswith("{") else "{" + text + "}")
        except ValueError:
            pass
    yield key, value
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _items(inner, name)
    elif isinstance(value, list):
        for inner in value:
            yield from _items(inner, key)


def keep_columns(extracts: dict, names: FrozenSet[str]) -> dict:
    """`extracts` with its Arrow batch of examples cut to the columns in `names` and the
    serialized examples."""
    batch = extracts.get(constants.ARROW_RECORD_BATCH_KEY)
    if batch is None:
        return extracts
    kept = [i for i, name in enumerate(batch.schema.names) if name in names or name == constants.ARROW_INPUT_COLUMN]
    if len(kept) == batch.num_columns:
        return extracts
    result = dict(extracts)
    result[constants.ARROW_RECORD_BATCH_KEY] = pa.RecordBatch.from_arrays(
        [batch.column(i) for i in kept], [batch.schema.names[i] for i in kept]
    )
    return result


def custom_extractors(eval_shared_model: Any, eval_config: Any, tensor_adapter_config: Any) -> List[Any]:
    """TFMA's default extractors for this evaluation, after `keep_columns` when there is a
    config and it says every feature the evaluation reads (`columns_read`)."""
    extractors = list(
        model_eval_lib.default_extractors(
            eval_shared_model=eval_shared_model, eval_config=eval_config, tensor_adapter_config=tensor_adapter_config
        )
    )
    names = columns_read(eval_config) if eval_config is not None else None
    if names is None:
        return extractors
    return [extractor.Extractor(stage_name=STAGE_NAME, ptransform=beam.Map(keep_columns, names))] + extractors
