"""gpuobsd: the long-running daemon (discovery, drain, control, metrics).

Lands with the daemon issue; the spine provides the segment reader it is built on
(gpuobs.segment).
"""
