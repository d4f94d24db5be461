import json, sys, tempfile, pathlib
sys.path.insert(0, "tests/gpu")
from harness import InjectedRun
from gpuobs.segment import LAUNCH_KINDS, OP_NODES_DTYPE
d = pathlib.Path(tempfile.mkdtemp(dir="/dev/shm"))
run = InjectedRun([sys.executable, "diag/workload.py"], d, mode="counter")
try:
    out = run.finish(timeout=120)
except AssertionError as e:
    print("FAILED", e); print(run.stderr[-3000:]); raise SystemExit(1)
print(json.dumps(out)[:6000])
rows = run.all_launches()
names = {v: k for k, v in LAUNCH_KINDS.items()}
import collections
print("kinds", collections.Counter(names.get(int(k), k) for k in rows["kind"]))
for i in range(len(rows)):
    r = rows[i]
    k = int(r["kind"])
    if k == LAUNCH_KINDS["op_nodes"]:
        v = rows[i:i + 1].view(OP_NODES_DTYPE)[0]
        print("op_nodes", int(v["op"]), hex(int(v["graph"])), int(v["count"]), [hex(int(n)) for n in v["nodes"]["node"][:int(v["count"])]])
    elif k in (LAUNCH_KINDS["graph_exec_created"], LAUNCH_KINDS["graph_node"], LAUNCH_KINDS["graph_launch"]):
        print(names[k], hex(int(r["graph_exec"])), hex(int(r["graph_node"])), int(r["kernel_slot"]))
print("stderr:", "\n".join(l for l in run.stderr.splitlines() if "gpuobs" in l)[:2000])
