"""One module per gpuobsctl subcommand: each defines NAME, HELP, add_arguments(parser) and
run(args) -> int."""

from . import (
    completion,
    coredump,
    export_parquet,
    export_trace,
    graphs,
    hangs,
    injector_path,
    kernels,
    ops,
    query,
    record,
    run,
    set_mode,
    source,
    status,
    steps,
    tail,
    trace,
)

COMMANDS = (
    status,
    set_mode,
    kernels,
    graphs,
    steps,
    ops,
    hangs,
    tail,
    record,
    trace,
    export_trace,
    export_parquet,
    query,
    run,
    injector_path,
    source,
    coredump,
    completion,
)
