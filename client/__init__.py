"""gpuobsctl: the command-line client of gpuobsd (lands with the daemon issue)."""
