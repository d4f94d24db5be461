"""gpuobs: an always-on observer for the GPU kernels of live LLM serving.

The package's native core (``gpuobs._native``) is built from the same C++ as the injector, so
the segment layout exists once, in ``segment/native/include/gpuobs/layout.h``.
"""

__version__ = "0.1.0"
