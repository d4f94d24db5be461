set -u
export PATH=/usr/local/cuda/bin:$PATH
bash tests/gpu/install_on_device.sh /tmp/b.log || tail -5 /tmp/b.log
LIB=$(python3 -c "import gpuobs,os;print(os.path.dirname(gpuobs.__file__))")/lib/libgpuobs_injector.so
mkdir -p /dev/shm/gd
run() { name=$1; shift; env "$@" python3 bench/workloads/decode_graph.py 50 /tmp/$name.pt | tail -1 | sed "s/^/$name /"; }
run base1
run base2
run blocks1 CUDA_INJECTION64_PATH=$LIB GPUOBS_SEGMENT_DIR=/dev/shm/gd GPUOBS_MODE=blocks
run counter1 CUDA_INJECTION64_PATH=$LIB GPUOBS_SEGMENT_DIR=/dev/shm/gd GPUOBS_MODE=counter
run sampled1 CUDA_INJECTION64_PATH=$LIB GPUOBS_SEGMENT_DIR=/dev/shm/gd GPUOBS_MODE=sampled GPUOBS_PATCH_SET=memory GPUOBS_SHIFT=10
run memfloor CUDA_INJECTION64_PATH=$LIB GPUOBS_SEGMENT_DIR=/dev/shm/gd GPUOBS_MODE=noop GPUOBS_PATCH_SET=memory
python3 - <<'PY'
import torch
b=torch.load('/tmp/base1.pt')
for n in ['base2','blocks1','counter1','sampled1','memfloor']:
    o=torch.load(f'/tmp/{n}.pt'); d=(o.float()-b.float()).abs()
    print(n, 'identical' if torch.equal(o,b) else f'differs: max abs {d.max().item():.3e}, elements {int((d>0).sum())}/{d.numel()}')
PY
