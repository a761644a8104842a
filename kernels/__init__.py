"""Kernel pairs: opaque primitives with hand-written forward and backward kernels.

Built in a later issue; the engine's `custom_rule(..., differentiable=False)` is the mechanism
they use.
"""
