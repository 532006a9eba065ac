# Source on the GPU host: installs the carried flashinfer wheels (.whl/) and puts kbench on the path.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# The host sets PYTHONDONTWRITEBYTECODE=1 and its torch install ships no bytecode: every process
# (the CLI and each worker) recompiled ~900 modules from source, 2.6 s of each kbench command's
# start (more with torch.compile's modules). Cache bytecode the way a normal install has it.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
