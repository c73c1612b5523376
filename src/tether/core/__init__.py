"""The core: tether's policy, pure: values and decisions, no operating system, no clock
(docs/architecture.md, "The core is pure"; ``tests/test_layers.py`` keeps the rule).
"""
