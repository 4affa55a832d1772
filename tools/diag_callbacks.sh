#!/usr/bin/env bash
# Bisect which earlier test makes the 100k-callback test hang (diagnostic).
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
run() {
    echo "== $*"
    timeout 45 python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=30 "$@" 2>&1 | tail -3
}
run tests/test_callbacks_gpu.py
for k in synchronization_policy priority_attribute access_policy attribute_argument stream_device attach_mem ipc_event; do
    run tests/test_attributes_gpu.py -k "$k" tests/test_callbacks_gpu.py::test_100k_callbacks_exactly_once_in_order
done
