"""gpuobsctl: the command line of gpuobsd, one module per subcommand in `commands/`."""
