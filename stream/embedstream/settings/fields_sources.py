"""Settings of the sources of a lane (its input topics): their weights in the fair shares."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, setting

_SRC = Group.SOURCES


@dataclass(frozen=True)
class SourceFields:
    source_weights: str | None = setting(
        None,
        "Weights of input topics sharing a lane, as topic=weight pairs, comma separated "
        "(e.g. orders=3,wiki=1); unset or unnamed topics weigh 1. Sources with work share "
        "each call's inputs and the lane's buffer by weight; one over its buffer share "
        "pauses while another wants more.",
        _SRC,
    )
