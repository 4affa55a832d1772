#!/usr/bin/env bash
# Bisect which earlier test makes the 100k-callback test hang (diagnostic).
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
T=tests/test_callbacks_gpu.py::test_100k_callbacks_exactly_once_in_order
run() {
    echo "== $*"
    timeout 45 python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=30 "$@" 2>&1 | tail -3
}
run tests/test_callbacks_gpu.py
run tests/test_attributes_gpu.py::test_synchronization_policy_round_trip_and_copy $T
run tests/test_attributes_gpu.py::test_priority_attribute_matches_property $T
run tests/test_attributes_gpu.py::test_access_policy_window $T
run tests/test_attributes_gpu.py::test_attribute_argument_errors $T
run tests/test_attributes_gpu.py::test_stream_device $T
run tests/test_attributes_gpu.py::test_attach_mem_async_single $T
run tests/test_attributes_gpu.py::test_ipc_event_across_processes $T
