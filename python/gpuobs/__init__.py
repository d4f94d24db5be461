"""gpuobs: an always-on observer for the GPU kernels of live LLM serving.

The package's native core (``gpuobs._native``) is built from the same segment library as the
injector (``segment/native``), so the segment layout exists once, in
``segment/native/include/gpuobs/layout.h``, and Python reads its field tables.
"""

__version__ = "0.1.0"
