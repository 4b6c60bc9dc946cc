"""The base of every wire model of a Messages request (:mod:`.request`, :mod:`.blocks`,
:mod:`.tool_params`, :mod:`.edit_params`): unknown fields are ignored, known ones typed
strictly."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")
