"""Flow definitions and helpers for the end-to-end engine suite (``tests/test_e2e_*.py``).

Worker children load these modules through ``tests.e2e_flows.registries``; the tests build
the same registries in-process for their Clients, so both sides share the Flow instances.
"""
