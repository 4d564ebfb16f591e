#!/usr/bin/env bash
# Sets up the virtual environment and runs the whole test suite (the compiled hot modules of
# broker/native.py as installed), then the tests of those modules again from source
# (RMQPY_PURE_PYTHON=1: the pure-Python fallback stays tested).
# Extra arguments go to pytest (e.g. scripts/test.sh -m soak) and skip the second pass.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
set +e
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$#" -eq 0 ]; then
  echo "--- the compiled modules' tests again, from source (RMQPY_PURE_PYTHON=1)"
  RMQPY_PURE_PYTHON=1 .venv/bin/python -m pytest -q tests/broker/test_native.py tests/remoting/test_codec.py \
    tests/remoting/test_limits.py tests/remoting/test_server_acl.py tests/remoting/test_server_errors.py \
    tests/broker/store/test_message.py tests/broker/store/test_message_id.py tests/broker/store/test_message_properties.py \
    tests/broker/store/test_java_hash.py tests/broker/store/test_mapped_file.py \
    tests/broker/store/test_record_walk.py tests/broker/store/test_commitlog.py tests/broker/store/test_consume_queue.py \
    tests/broker/store/test_index_file.py tests/broker/store/test_reput.py tests/broker/test_gc_quiet.py \
    tests/broker/test_put_coalescer.py tests/broker/test_put_dedup.py tests/broker/ha/test_protocol.py \
    tests/broker/test_classic_pair.py tests/broker/test_send_service.py tests/remoting/test_refusal_errors.py \
    tests/remoting/test_header_fields.py tests/broker/store/test_names.py tests/remoting/test_put_times.py \
    tests/broker/store/test_full_disk.py tests/broker/store/test_dispatch_skip.py tests/broker/store/test_record_scan.py \
    tests/broker/store/test_record_encode.py tests/remoting/test_header_codec.py tests/broker/store/test_index_write.py
  pure_rc=$?
  [ "$rc" -eq 0 ] && rc=$pure_rc
fi
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating as failure" >&2
  exit 1
fi
exit "$rc"
