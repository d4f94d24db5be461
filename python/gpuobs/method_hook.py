"""Wrapping a method of a framework's class once per process: the vLLM plugin's hooks on the
worker's step and on graph capture, and the profiler notice on torch's profiler start. vLLM may
load a plugin more than once in a process; a second wrap would record everything twice."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

WRAPPED = "__gpuobs_wrapped__"


def wrap_method_once(
    module_name: str, owner: str, method: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> bool:
    """Replaces `owner.method` of the module with make_wrapper(original); False when it was already
    wrapped. Raises (for the caller to log) when the module, the class or the method is missing."""
    holder = getattr(importlib.import_module(module_name), owner)
    original: Callable[..., Any] = getattr(holder, method)
    if getattr(original, WRAPPED, False):
        return False
    wrapper = functools.wraps(original)(make_wrapper(original))
    setattr(wrapper, WRAPPED, True)
    setattr(holder, method, wrapper)
    return True
