"""What Beam's workers run for `taxi-pipeline monitor`: request files read into record
batches decoded by the curated schema, and malformed records counted and named. Imports
what the work needs, never TFX's API (see `components.custom.beam_fns`)."""

from __future__ import annotations

import json
import re
from typing import Iterator, List, Optional, Tuple

import apache_beam as beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.coders import example_coder

from components.support import request_logs

MALFORMED = "malformed"
# Requests decoded into one record batch.
DECODE_BATCH = 1000


class ReadRequests(beam.DoFn):
    """One logged file's requests as record batches of the schema's columns (every batch
    has the same, so TFDV can combine them); each malformed record as a tagged output
    naming it. A record the schema's decoder refuses (a value of the wrong type) is
    malformed too."""

    def __init__(self, schema: schema_pb2.Schema):
        self._schema = schema

    def setup(self) -> None:
        self._decoder = example_coder.ExamplesToRecordBatchDecoder(self._schema.SerializeToString())

    def _decoded(self, records: List[bytes]) -> Tuple[Optional[object], str]:
        """(the record batch of `records`, "") or (None, why the decoder refused them). A
        refusal leaves the decoder's builders half filled (its next batch fails on
        mismatched columns), so a fresh decoder replaces it."""
        try:
            return self._decoder.DecodeBatch(records), ""
        except RuntimeError as err:  # tfx_bsl's decoder: INVALID_ARGUMENT (a wrong type), DATA_LOSS
            self.setup()
            return None, str(err).splitlines()[0][:160] or type(err).__name__

    def _decode(self, path: str, batch: List[Tuple[str, bytes]]) -> Iterator[object]:
        decoded, _ = self._decoded([record for _, record in batch])
        if decoded is not None:
            yield decoded
            return
        good = []
        for where, record in batch:
            _, reason = self._decoded([record])
            if reason:
                yield beam.pvalue.TaggedOutput(MALFORMED, str(request_logs.Malformed(path, where, reason)))
            else:
                good.append(record)
        if good:
            yield self._decoder.DecodeBatch(good)

    def process(self, item: Tuple[str, str]) -> Iterator[object]:
        path, file_format = item
        batch: List[Tuple[str, bytes]] = []
        for found in request_logs.read(path, file_format):
            if isinstance(found, request_logs.Malformed):
                yield beam.pvalue.TaggedOutput(MALFORMED, str(found))
                continue
            batch.append(found)
            if len(batch) == DECODE_BATCH:
                yield from self._decode(path, batch)
                batch = []
        if batch:
            yield from self._decode(path, batch)


def _natural(text: str) -> list:
    """Sorts "line 9" before "line 10"."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


class _CountAndShow(beam.CombineFn):
    """(how many, the first `shown` of them by file and place)."""

    def __init__(self, shown: int):
        self._shown = shown

    def create_accumulator(self):
        return 0, []

    def add_input(self, accumulator, text: str):
        count, kept = accumulator
        return count + 1, sorted(kept + [text], key=_natural)[: self._shown]

    def merge_accumulators(self, accumulators):
        count, kept = 0, []
        for more, texts in accumulators:
            count += more
            kept.extend(texts)
        return count, sorted(kept, key=_natural)[: self._shown]

    def extract_output(self, accumulator) -> str:
        count, kept = accumulator
        return json.dumps({"count": count, "shown": sorted(kept, key=_natural)})


class SummarizeMalformed(beam.PTransform):
    """Malformed records' descriptions -> one JSON line: their count and the first `shown`."""

    def __init__(self, shown: int):
        super().__init__()
        self._shown = shown

    def expand(self, malformed: beam.PCollection) -> beam.PCollection:
        return malformed | beam.CombineGlobally(_CountAndShow(self._shown))
