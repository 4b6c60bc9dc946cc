"""Feature stages: policy hooks the core runs at fixed points of every call.

- :mod:`.context`: the points, in their legal order, and what a stage is handed;
- :mod:`.chain`: a route's stages run in order, each under its ``on_error`` policy,
  the command re-validated after each mutating stage;
- :mod:`.shaped`: the request-side points run on a request, for a run and a count alike,
  and the tools they withheld;
- :mod:`.shipped`: the two stages the package ships (``tool_filter``, ``param_clamp``).

Stages are discovered from the Python entry point group ``stateway.stages`` (see
``stateway/stage_loader.py``): an operator adds one by installing a package.
"""
