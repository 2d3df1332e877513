"""JSON as strict parsers read it. Python writes NaN and infinity as the bare literals `NaN`
and `Infinity`, which JSON does not have: browsers' `JSON.parse`, `jq` and trace viewers
refuse the whole document. Everything mnrt prints or writes for machines (`--json`,
`--report`, profiles) writes a non-finite float as a string ("nan", "inf", "-inf") instead.
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_value(v: Any) -> Any:
    """`v` as strict JSON holds it: a non-finite float as a string, in dicts, lists and
    tuples at any depth."""
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return v


def dumps(doc: Any, **kwargs: Any) -> str:
    """`json.dumps` of `doc` as strict JSON (see `json_value`)."""
    return json.dumps(json_value(doc), allow_nan=False, **kwargs)
