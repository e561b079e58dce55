"""One declaration per setting a user may change: a dataclass field with its default and
its help. The command line makes a flag of each (`pipeline.options.add_settings`:
`--batch-size` for `batch_size`), `run`, `retrain` and `compile` take them all, and the
settings reach the components whole (the Trainer's as its `custom_config`). So a new
setting is two edits: its declaration and the code that reads it."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence


def setting(default: Any, help: str, *, minimum: Optional[float] = None,
            choices: Optional[Sequence[str]] = None) -> Any:
    """A field the command line offers as `--NAME` (underscores as dashes); `minimum`: the
    least value it takes, `choices`: the values it takes (checked when the flags are read,
    exit 2 with the usage)."""
    return dataclasses.field(default=default, metadata={"help": help, "minimum": minimum, "choices": choices})


def declared(cls: type) -> List[dataclasses.Field]:
    """The fields of dataclass `cls` made with `setting`, in their order."""
    return [field for field in dataclasses.fields(cls) if "help" in field.metadata]


def flag(field: dataclasses.Field) -> str:
    return "--" + field.name.replace("_", "-")
