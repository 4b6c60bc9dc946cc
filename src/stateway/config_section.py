"""What every table of the configuration file is: unknown keys refused (a misspelt key
is an error, not a silent default), values frozen once loaded."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
