"""The policy engine: tool manifests, trust levels, the decision before every call, inputs.

Plain Python (no Django), so the runtime can call the decision on every iteration cheaply and
the tests can walk its whole table.
"""
