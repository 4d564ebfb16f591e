"""Child process for the crash tests: writes messages forever, printing one line per ack.

Usage: python -m tests.broker.store._store_writer <root> <ASYNC_FLUSH|SYNC_FLUSH> <batch> [<first i>]
Each acknowledged message prints ``ack <i> <physical offset> <queue id> <queue offset>``.
The parent kills it with SIGKILL at a random moment.
"""
from __future__ import annotations

import sys

from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore


def body(i: int) -> bytes:
    return (b"msg-%08d-" % i) + bytes([65 + i % 26]) * (i * 37 % 700)


def main() -> None:
    root, flush, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    store = DefaultMessageStore(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                                flush_disk_type=flush, flush_interval_commit_log=5,
                                flush_interval_consume_queue=20, warm_mapped_file_enable=False,
                                max_hash_slot_num=1000, max_index_num=4000)
    store.load()
    store.start()
    out = sys.stdout
    out.write("started\n")
    out.flush()
    i = first
    while True:
        msgs = [MessageExt(f"Crash{(i + k) % 2}", body(i + k), queue_id=(i + k) % 3,
                           properties={"KEYS": f"k{i + k}"}) for k in range(batch)]
        r = store.put_messages(msgs)
        if not r.ok:
            out.write(f"fail {r.status.value} {r.error}\n")
            out.flush()
            continue
        ar = r.append_result
        out.write("".join(f"ack {i + k} {ar.physical_offsets[k]} {msgs[k].queue_id} {ar.queue_offsets[k]}\n"
                          for k in range(batch)))
        out.flush()
        i += batch


if __name__ == "__main__":
    main()
