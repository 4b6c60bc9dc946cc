"""What every table of the configuration file is: unknown keys refused (a misspelt key
is an error, not a silent default), values frozen once loaded, and no number infinite or
NaN (``drain_timeout = inf`` is no wait the gateway can keep, nor ``weight = nan`` a
share)."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
