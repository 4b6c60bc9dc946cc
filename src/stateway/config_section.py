"""What every table of the configuration file is: unknown keys refused (a misspelt key
is an error, not a silent default), values frozen once loaded, no number infinite or
NaN (``drain_timeout = inf`` is no wait the gateway can keep, nor ``weight = nan`` a
share) nor a boolean (``retention = true`` is no duration, though pydantic takes it as
1); and what a setting naming an environment variable holds (:data:`VariableName`)."""

import re
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            kinds = {cls.model_fields[info.field_name].annotation}
            kinds |= set(typing.get_args(*kinds))
            if bool not in kinds and kinds & {int, float}:
                raise PydanticCustomError("bool_type", "Input should be a number, not a boolean")
        return value


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_KEY_LIKE_PART = re.compile(r"(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[a-z])[A-Za-z0-9]{20,}")
"""A run of random-looking letters and digits no variable's name has: 20 or more, lower
case and digits among them (``gsk_`` + 52 of them, ``hf_``, ``ghp_``, a Google ``AIza...``
key, a hex or base62 key), where names are words (``OPENAI_API_KEY``, ``MyGroqKey``)."""


def _variable_name(name: str) -> str:
    """``name``, an environment variable's; else refused without showing it: the key
    itself is the likely mistake (``api_key_env = "sk-..."``, or ``"gsk_..."``, whose
    alphabet is a name's), and "environment variable sk-... is not set" would print it,
    and log it on a reload."""
    if not _VARIABLE_NAME.fullmatch(name) or any(
        _KEY_LIKE_PART.fullmatch(part) for part in name.split("_")
    ):
        raise ValueError(
            "must be an environment variable's name (letters, digits and _), the variable "
            "holding the secret, not the secret itself (not shown here)"
        )
    return name


VariableName = Annotated[str, AfterValidator(_variable_name)]
"""A setting naming the environment variable that holds a secret (``api_key_env``)."""
