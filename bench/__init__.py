"""``python -m bench``: latency, throughput and memory of the gateway against two baselines.

The baselines are direct calls to the fake model server and a bare pass-through hop
(:mod:`bench.passthrough`, the floor any Python hop pays). See ``docs/benchmarks.md``.
"""
