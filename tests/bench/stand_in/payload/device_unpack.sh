#!/usr/bin/env bash
# Stand-in for shared/tools/vllm-device/device_unpack.sh --env: the stand-in vLLM's site folder.
site="$(cd "$(dirname "$0")/../site" && pwd)"
echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}"
