"""Stand-in for make_tiny_qwen3.py: the model folder only."""

import os
import sys

os.makedirs(sys.argv[1], exist_ok=True)
