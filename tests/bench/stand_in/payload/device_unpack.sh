#!/usr/bin/env bash
# Stand-in for the vLLM payload's device_unpack.sh --env: the stand-in vLLM's site folder.
site="$(cd "$(dirname "$0")/../site" && pwd)"
echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}"
