"""TFX's StatisticsGen, with small data's statistics computed in its own process.

When Beam runs in the component's process anyway (`span_statistics.beam_runs_here`) and the
examples hold at most `IN_PROCESS_ROWS` rows, as ImportExampleGen counted
them (`split_rows`), each split's records are decoded into one record batch, a split per
thread, and TFDV's in-memory computation makes its statistics: the data gate's way for
its per-span statistics (`span_statistics.span_statistics_in_process`), without the fixed
cost of building and running a Beam pipeline. The same statistics as TFX's Beam pass, to
the last bits of a float (one sum over a split where Beam adds up its batches' sums;
exactly the same on data/), while no categorical feature has more than
`span_statistics.EXACT_DISTINCT_VALUES` distinct values in a split (checked: beyond,
TFX's pass runs instead); TFDV lists the features in another order. The artifact, its
files and its properties are TFX's. Anything else (examples other than tf.Example, a
split without rows, a schema input, stats options, excluded splits, per-split sample
rates, sharded output, a custom split pattern, rows not recorded, as for spans copied as
they are in window mode, Beam elsewhere) runs TFX's executor as it is.

When TFX changes under it,
tests/components/custom/test_statistics.py::test_in_process_statistics_are_tfx_s_artifact_for_artifact
runs TFX's executor and this one on the same examples and compares what each wrote.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional

from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx import types
from tfx.components.statistics_gen import executor as tfx_statistics_gen
from tfx.components.util import examples_utils
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, json_utils, stats_utils

from components.custom import beam_fns, span_statistics
from components.model import split_rows

_EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
_STATISTICS_KEY = standard_component_specs.STATISTICS_KEY
# Up to this many rows in all, in this process. The executor alone, two alternating runs
# each, in-process against TFX's pass: 80,000 rows 1.02-1.06 s against 1.48-1.65 s,
# 250,000 rows 3.11-3.35 s against 2.76-3.18 s (and every record in memory at once).
IN_PROCESS_ROWS = 150_000
# What TFX's executor reads besides the examples; with any of them set, it runs as it is.
_SETTINGS = (standard_component_specs.STATS_OPTIONS_JSON_KEY, standard_component_specs.SAMPLE_RATE_BY_SPLIT_KEY,
             standard_component_specs.SHARDED_STATS_OUTPUT_KEY)


class Executor(tfx_statistics_gen.Executor):
    def Do(self, input_dict: Dict[str, List[types.Artifact]], output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        examples = artifact_utils.get_single_instance(input_dict[_EXAMPLES_KEY])
        splits = self._in_process_splits(input_dict, examples, exec_properties)
        computed = split_statistics_in_process(examples, splits) if splits else None
        if computed is None:
            super().Do(input_dict, output_dict, exec_properties)
            return
        self._log_startup(input_dict, output_dict, exec_properties)
        statistics = artifact_utils.get_single_instance(output_dict[_STATISTICS_KEY])
        statistics.split_names = artifact_utils.encode_split_names(splits)
        statistics.span = examples.span
        try:
            link = stats_utils.generate_stats_dashboard_link(statistics)
        except Exception:  # as TFX's executor: a link is not worth the statistics
            logging.exception("no statistics dashboard link")
            link = ""
        statistics.set_string_custom_property(tfx_statistics_gen.STATS_DASHBOARD_LINK, link)
        statistics.set_json_value_custom_property(tfx_statistics_gen.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME,
                                                  json_utils.dumps({split: 1.0 for split in splits}))
        for split, result in zip(splits, computed):
            output_uri = artifact_utils.get_split_uri([statistics], split)
            io_utils.write_bytes_file(os.path.join(output_uri, tfx_statistics_gen.DEFAULT_FILE_NAME),
                                      result.SerializeToString())
            logging.info("Statistics for split %s written to %s, computed in this process.", split, output_uri)

    def _in_process_splits(self, input_dict: Dict[str, List[types.Artifact]], examples: types.Artifact,
                           exec_properties: Dict[str, Any]) -> Optional[List[str]]:
        """The splits whose statistics are computed in this process, or None: TFX's pass."""
        excluded = json_utils.loads(exec_properties.get(standard_component_specs.EXCLUDE_SPLITS_KEY) or "null")
        if (excluded or any(exec_properties.get(key) for key in _SETTINGS)
                or input_dict.get(standard_component_specs.SCHEMA_KEY)
                or examples.has_custom_property(examples_utils.CUSTOM_SPLIT_PATTERN_PROPERTY_NAME)):
            return None
        if examples_utils.get_payload_format(examples) != example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE:
            return None
        splits = artifact_utils.decode_split_names(examples.split_names)
        rows = split_rows.read(examples.uri) or {}
        counted = [rows.get(split) for split in splits]
        if not splits or not all(isinstance(count, int) and count > 0 for count in counted):
            return None
        if sum(counted) > IN_PROCESS_ROWS:
            return None
        return splits if span_statistics.beam_runs_here(PipelineOptions(self._beam_pipeline_args)) else None


def split_statistics_in_process(
    examples: types.Artifact, splits: List[str]
) -> Optional[List[statistics_pb2.DatasetFeatureStatisticsList]]:
    """Each split's statistics, a split per thread, by TFDV's in-memory computation on all
    its records decoded at once (without a schema, as TFX's pass decodes them); None when
    a categorical feature of a split has more distinct values than it counts exactly."""
    import tensorflow as tf

    def records_of(split: str) -> List[bytes]:
        folder = artifact_utils.get_split_uri([examples], split)
        return [record for name in sorted(tf.io.gfile.listdir(folder))
                for record in beam_fns.tfrecords(os.path.join(folder, name))]

    computed = span_statistics.statistics_in_memory(splits, records_of)
    if any(result is None for result in computed):  # counted rows, no records: TFX's pass says what it finds
        return None
    if any(span_statistics.beyond_exact_counts(result) for result in computed):
        logging.info("a categorical feature of a split has more than %d distinct values: TFX's Beam pass computes "
                     "the statistics instead", span_statistics.EXACT_DISTINCT_VALUES)
        return None
    return computed


def executor() -> executor_spec.BeamExecutorSpec:
    """The StatisticsGen node's executor spec."""
    return executor_spec.BeamExecutorSpec(Executor)
